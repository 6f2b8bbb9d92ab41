#!/usr/bin/env bash
# Install everything the tests need, then lint, type-check and run the whole suite.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install.sh dev
scripts/lock.sh --verify dev  # pip freeze against the lock: exactly what it pins
scripts/lock.sh --check       # pyproject.toml and the lock agree (else: scripts/lock.sh)
scripts/services.sh
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/mypy
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 LITELLM_LOCAL_MODEL_COST_MAP=True
exec .venv/bin/python -m pytest -q -p no:cacheprovider "$@"
