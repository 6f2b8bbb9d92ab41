"""GPU check (not CI): two vLLM engines on one GPU run the backend contract suite.

Builds both engines on GPU 0 (each with a fixed KV-cache budget so they share it) and
runs the same assertions CI runs on CPU: deltas concatenate to the final text, usage
is consistent, cancel frees the slot, a shared >=128-token prefix reports cached
tokens, two engines serve at once with their own statistics. Budget: under 5 minutes.

    python -m bench.gpu.vllm_check                      # tiny random Llama, built here
    python -m bench.gpu.vllm_check --model /models/Qwen2.5-0.5B-Instruct   # a local HF folder

Nothing is downloaded; the tiny model needs only torch, transformers and tokenizers.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def main() -> int:
    parser = argparse.ArgumentParser(description="two vLLM engines on one GPU, contract suite")
    parser.add_argument("--model", type=Path, default=None, help="local HF model folder")
    parser.add_argument("--device", type=int, default=0)
    parser.add_argument("--kv-cache-gib", type=float, default=2.0, help="per engine")
    parser.add_argument("--timeout-s", type=int, default=280)
    args = parser.parse_args()
    options = {
        "device_ids": [args.device],
        "enforce_eager": False,  # CUDA graphs on, as in production
        "kv_cache_memory_bytes": int(args.kv_cache_gib * 2**30),
        "max_model_len": 2048,
    }
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "TIERGATE_TEST_VLLM_OPTIONS": json.dumps(options),
        "TIERGATE_TEST_VLLM_SEQUENTIAL": "1",
    }
    if args.model is not None:
        env["TIERGATE_TEST_VLLM_MODEL"] = str(args.model.resolve())
    command = [
        sys.executable,
        "-m",
        "pytest",
        "tests/backends/test_contract.py",
        "tests/backends/test_vllm.py",
        "-k",
        "vllm",
        "-q",
        "-p",
        "no:cacheprovider",
        f"--timeout={args.timeout_s}",
    ]
    started = time.monotonic()
    try:
        result = subprocess.run(command, cwd=REPO, env=env, timeout=args.timeout_s + 20)
    except subprocess.TimeoutExpired:
        print(f"gpu check: over {args.timeout_s}s", file=sys.stderr)
        return 124
    verdict = "passed" if result.returncode == 0 else f"FAILED (rc {result.returncode})"
    print(f"gpu check {verdict} in {time.monotonic() - started:.0f}s")
    return result.returncode


if __name__ == "__main__":
    raise SystemExit(main())
