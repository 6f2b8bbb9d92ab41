#!/usr/bin/env bash
# Install (if needed) and serve tiergate on its embedded default (config/gateway.yaml).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install.sh serve
exec .venv/bin/tiergate serve "$@"
