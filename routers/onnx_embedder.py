"""all-MiniLM-L6-v2 on ONNX Runtime: exported once to a cache folder, int8 weights.

Why: at batch 1 over a 128-token prompt the int8 graph runs in about a third of the
time torch needs (``bench/perf/classify_latency.py``), and its vectors keep a cosine of
0.99 with the float model's (per-channel, MatMul-only quantisation). Only the first
``max_tokens`` tokens are embedded: the classifier and the cache need the gist, and
the cost grows with the length. Texts of a batch are grouped by length so padding
stays small.

The export needs torch and onnx; serving needs only onnxruntime and tokenizers.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import tempfile
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from routers.batching import MicroBatcher
from routers.cpu import int8_pays
from routers.embedding import EmbedderUnavailable, leading_words, minilm_path

log = logging.getLogger(__name__)

BUCKET = 16  # texts per sub-batch after sorting by length (float graph)


def cache_dir() -> Path:
    root = os.environ.get("TIERGATE_CACHE_DIR") or str(Path.home() / ".cache" / "tiergate")
    return Path(root) / "onnx"


def _model_digest(model_path: Path) -> str:
    weights = model_path / "model.safetensors"
    digest = hashlib.sha256(str(weights.stat().st_size).encode())
    with weights.open("rb") as handle:
        digest.update(handle.read(1 << 20))
    return digest.hexdigest()[:16]


def _export(model_path: Path, target: Path) -> None:
    """Model + mean pooling + L2 norm as one float32 graph (torch and onnx imported here)."""
    import torch
    from transformers import AutoModel

    model = AutoModel.from_pretrained(str(model_path)).eval()

    class Pooled(torch.nn.Module):  # type: ignore[misc,unused-ignore]
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any) -> Any:
            hidden = self.model(
                input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
            ).last_hidden_state
            mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
            return torch.nn.functional.normalize(pooled, dim=-1)

    sample = torch.ones(2, 8, dtype=torch.long)
    axes = {0: "batch", 1: "tokens"}
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            Pooled().eval(),
            (sample, sample, torch.zeros_like(sample)),
            str(target),
            input_names=["input_ids", "attention_mask", "token_type_ids"],
            output_names=["embedding"],
            dynamic_axes={
                "input_ids": axes,
                "attention_mask": axes,
                "token_type_ids": axes,
                "embedding": {0: "batch"},
            },
            opset_version=17,
            dynamo=False,
        )


def _quantize(source: Path, target: Path) -> None:
    from onnxruntime.quantization import QuantType, quantize_dynamic

    quantize_dynamic(
        str(source),
        str(target),
        weight_type=QuantType.QInt8,
        per_channel=True,
        reduce_range=True,
        op_types_to_quantize=["MatMul"],
    )


def ensure_onnx(model_path: Path, quantize: bool = True, folder: Path | None = None) -> Path:
    """The cached graph for this model, exported (and quantised) on first use."""
    folder = folder or cache_dir()
    name = f"minilm-{_model_digest(model_path)}-{'int8' if quantize else 'fp32'}.onnx"
    target = folder / name
    if target.exists():
        return target
    folder.mkdir(parents=True, exist_ok=True)
    log.info("exporting the embedder to ONNX (once): %s", target)
    try:
        with tempfile.TemporaryDirectory(dir=folder) as tmp:
            plain = Path(tmp) / "model.onnx"
            _export(model_path, plain)
            built = plain
            if quantize:
                built = Path(tmp) / "model.int8.onnx"
                _quantize(plain, built)
            os.replace(built, target)  # atomic: a concurrent exporter never sees half a file
    except ImportError as exc:
        raise EmbedderUnavailable(f"exporting the embedder needs torch and onnx: {exc}") from exc
    return target


class OnnxEmbedder:
    """Text → L2-normalised 384-d vector; async calls are micro-batched in one thread."""

    dim = 384

    def __init__(
        self,
        model_path: str | None = None,
        max_tokens: int = 128,
        quantize: bool | Literal["auto"] = True,
        threads: int | None = None,
        max_batch: int = 32,
        max_wait_ms: float = 0.0,
    ) -> None:
        try:
            import onnxruntime as ort
            from tokenizers import Tokenizer
        except ImportError as exc:
            raise EmbedderUnavailable(f"the ONNX embedder needs onnxruntime: {exc}") from exc
        path = Path(model_path or minilm_path())
        if quantize == "auto":
            quantize = int8_pays()
        self.name = f"all-minilm-l6-v2/onnx-{'int8' if quantize else 'fp32'}/{max_tokens}"
        self.max_tokens = max_tokens
        self._rows_per_run = 1 if quantize else BUCKET
        self._tokenizer: Any = Tokenizer.from_file(str(path / "tokenizer.json"))
        self._tokenizer.enable_truncation(max_tokens)
        self._tokenizer.no_padding()
        options = ort.SessionOptions()
        # One thread by default: a one-row run of ~30 tokens is too small to split, and
        # a pool of threads that sleep and wake on every operator cost 1.8x the CPU of
        # one thread (3.7 vs 2.0 ms a short prompt, bench/perf/embed_cpu.py); more throughput
        # comes from more ``workers``, each on its own core.
        options.intra_op_num_threads = threads or 1
        options.inter_op_num_threads = 1
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        # Spinning worker threads burn the cores the event loop and engines need, and on
        # a busy host they make a one-row run several times slower (bench/).
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        options.add_session_config_entry("session.inter_op.allow_spinning", "0")
        self._session: Any = ort.InferenceSession(
            str(ensure_onnx(path, quantize)), options, providers=["CPUExecutionProvider"]
        )
        self._batcher = MicroBatcher(self.embed_sync, max_batch, max_wait_ms)

    @property
    def batcher(self) -> MicroBatcher:
        return self._batcher

    def token_counts(self, texts: Sequence[str]) -> list[int]:
        return [len(e.ids) for e in self._tokenizer.encode_batch(list(texts))]

    def embed_sync(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        if not texts:
            return out
        limit = self.max_tokens
        encoded = self._tokenizer.encode_batch([leading_words(t, limit) for t in texts])
        order = sorted(range(len(encoded)), key=lambda i: len(encoded[i].ids))
        step = self._rows_per_run
        for start in range(0, len(order), step):
            rows = order[start : start + step]
            width = max(len(encoded[i].ids) for i in rows)
            ids = np.zeros((len(rows), width), dtype=np.int64)
            mask = np.zeros((len(rows), width), dtype=np.int64)
            for r, i in enumerate(rows):
                n = len(encoded[i].ids)
                ids[r, :n] = encoded[i].ids
                mask[r, :n] = 1
            feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
            out[rows] = self._session.run(None, feeds)[0]
        return out

    async def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        return await self._batcher.submit(texts)

    async def aclose(self) -> None:
        await asyncio.to_thread(self._batcher.close)
