#!/usr/bin/env bash
# Prints the path of a Python (>= 3.9) in the repository's virtual
# environment .venv, creating it when needed with the omst package
# (bindings/python, installed as a user would: pip install ./bindings/python)
# and what its tests and examples use (pytest, numpy). Messages go to stderr;
# stdout is only the path. Reinstalls the package on every call (fast: pure
# Python), so the tests always run the checkout's code.
set -euo pipefail
cd "$(dirname "$0")/.."
py=""
for c in python3 python; do
  if command -v "$c" >/dev/null && "$c" -c 'import sys; sys.exit(sys.version_info < (3, 9))' 2>/dev/null; then
    py=$(command -v "$c"); break
  fi
done
if [ -z "$py" ]; then
  echo "pyenv: installing python3 (apt-get)" >&2
  { apt-get install -y -qq python3 python3-venv python3-pip || { apt-get update -qq && apt-get install -y -qq python3 python3-venv python3-pip; }; } >&2
  py=$(command -v python3)
fi
if [ ! -x .venv/bin/python ]; then
  echo "pyenv: creating .venv with $py" >&2
  if ! "$py" -m venv .venv >&2 2>&1; then
    echo "pyenv: python3 -m venv failed; installing python3-venv (apt-get)" >&2
    { apt-get install -y -qq python3-venv || { apt-get update -qq && apt-get install -y -qq python3-venv; }; } >&2
    rm -rf .venv
    "$py" -m venv .venv >&2
  fi
fi
.venv/bin/python -c 'import pytest, numpy' 2>/dev/null || .venv/bin/python -m pip install -q pytest numpy >&2
.venv/bin/python -m pip install -q --force-reinstall --no-deps ./bindings/python >&2
echo "$PWD/.venv/bin/python"
