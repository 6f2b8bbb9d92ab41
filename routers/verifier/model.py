"""The learned verifier at run time: a MiniLM cross-encoder on ONNX Runtime, int8.

It reads the cached question and the asked one together and gives P(same question).
Only pairs the rules leave undecided reach it (``routers.verifier.rules``). The
threshold for a tenant's ``max_wrong_rate`` comes from the calibration table written
next to the model (``routers.training.verifier_calibrate``): the most permissive calibrated
threshold whose bound is within the tenant's.

Built where the embedding runs: in the embedder worker process when there is one
(``routers.embed_worker``), else in a worker thread. Serving needs onnxruntime and
tokenizers only.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from routers.embedding import EmbedderUnavailable

MODEL_DIR = Path(__file__).resolve().parents[1] / "model" / "verifier"
MODEL_FILE = "verifier-int8.onnx"


@dataclass(frozen=True, slots=True)
class CalibrationPoint:
    max_wrong_rate: float
    threshold: float  # the lowest probability served at this bound
    negatives: int  # calibration near-misses the bound was measured on
    recall: float  # calibration paraphrases accepted at the threshold
    wrong: int = 0  # calibration near-misses accepted at the threshold


@dataclass(frozen=True, slots=True)
class Calibration:
    points: tuple[CalibrationPoint, ...]  # ascending max_wrong_rate

    def threshold(self, max_wrong_rate: float) -> float | None:
        """The threshold for a bound; None when even the tightest point is looser (then
        only the rules decide: ``strict``)."""
        best = None
        for point in self.points:
            if point.max_wrong_rate <= max_wrong_rate + 1e-12:
                best = point.threshold
        return best


def load_calibration(folder: Path = MODEL_DIR) -> Calibration:
    meta = json.loads((folder / "meta.json").read_text())
    points = tuple(
        CalibrationPoint(
            float(p["max_wrong_rate"]),
            float(p["threshold"]),
            int(p["negatives"]),
            float(p["recall"]),
            int(p.get("wrong", 0)),
        )
        for p in meta.get("calibration", ())
    )
    return Calibration(tuple(sorted(points, key=lambda p: p.max_wrong_rate)))


def model_available(folder: Path = MODEL_DIR) -> bool:
    return (folder / MODEL_FILE).exists() and (folder / "tokenizer.json").exists()


class CrossEncoderVerifier:
    """``score(pairs)``: P(same question) per ``(cached, asked)`` pair, in one ONNX run."""

    def __init__(self, folder: Path = MODEL_DIR, threads: int = 1) -> None:
        try:
            import onnxruntime as ort
            from tokenizers import Tokenizer
        except ImportError as exc:
            raise EmbedderUnavailable(f"the verifier needs onnxruntime: {exc}") from exc
        if not model_available(folder):
            raise EmbedderUnavailable(f"no verifier model in {folder}")
        meta = json.loads((folder / "meta.json").read_text())
        self.max_tokens = int(meta["max_tokens"])
        self._tokenizer: Any = Tokenizer.from_file(str(folder / "tokenizer.json"))
        self._tokenizer.enable_truncation(self.max_tokens, strategy="longest_first")
        self._tokenizer.no_padding()
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        self._session: Any = ort.InferenceSession(
            str(folder / MODEL_FILE), options, providers=["CPUExecutionProvider"]
        )

    def score(self, pairs: Sequence[tuple[str, str]]) -> list[float]:
        if not pairs:
            return []
        encoded = self._tokenizer.encode_batch([(a, b) for a, b in pairs])
        width = max(len(e.ids) for e in encoded)
        ids = np.zeros((len(encoded), width), dtype=np.int64)
        mask = np.zeros_like(ids)
        types = np.zeros_like(ids)
        for row, item in enumerate(encoded):
            n = len(item.ids)
            ids[row, :n] = item.ids
            mask[row, :n] = 1
            types[row, :n] = item.type_ids
        feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}
        logits = self._session.run(None, feeds)[0]
        return [1.0 / (1.0 + math.exp(-float(x))) for x in logits]
