#!/usr/bin/env bash
# Creates .venv (if missing) and installs trainspec with its development tools into it.
# torch is pinned first: an unpinned requirement could pull a multi-GB CUDA build.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[[ -x .venv/bin/python ]] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip setuptools wheel
.venv/bin/python -m pip install -q "torch==${TRAINSPEC_TORCH_VERSION:-2.13.0}"
# Strict editable mode keeps the package-dir mapping visible to mypy and pyright.
.venv/bin/python -m pip install -q -e '.[dev]' --config-settings editable_mode=strict
if [[ -d examples/trainspec_example ]]; then
  .venv/bin/python -m pip install -q --no-build-isolation -e examples/trainspec_example
fi
