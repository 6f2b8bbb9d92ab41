#!/usr/bin/env bash
# Install (if needed) and serve tiergate on its embedded default (config/gateway.yaml: three
# models on llama.cpp). `scripts/serve.sh --small` serves only the 135M model
# (config/examples/small-only.yaml); other arguments go to `tiergate serve`.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install.sh serve
if [ "${1:-}" = --small ]; then
  shift
  exec .venv/bin/tiergate serve --config config/examples/small-only.yaml "$@"
fi
exec .venv/bin/tiergate serve "$@"
