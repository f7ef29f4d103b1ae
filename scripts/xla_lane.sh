#!/usr/bin/env bash
# XLA lane (opt-in): a separate virtual environment with torch==2.9.0 and torch_xla==2.9.0,
# then scripts/xla_smoke.py on PJRT's CPU device (PJRT_DEVICE=CPU): XLAStrategy trains a few
# steps on one XLA device and must match CPU training.
#
# Scope: this lane verifies the SINGLE-DEVICE XLA path only. Multi-process XLA (several
# devices: XLALauncher / xmp.spawn, XLAEnvironment, gradient all-reduce on the devices) is
# TPU-verified-only: PJRT's CPU device runs as one process here, so run that path on a TPU
# host before relying on it.
#
# Cost: torch 2.9.0 + torch_xla 2.9.0 and their dependencies are a large download (about
# 7 GB with the default CUDA torch wheel; set TORCH_INDEX_URL to an index that serves the
# much smaller CPU wheel, where one is reachable). Nothing else in the project needs this environment.
#
# Usage: scripts/xla_lane.sh            (creates .venv-xla once, then runs the smoke test)
# Environment: PYTHON (interpreter for the venv, default python3; torch_xla 2.9 has wheels
# for CPython 3.10-3.12), XLA_VENV (default .venv-xla), TORCH_INDEX_URL (optional).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
VENV=${XLA_VENV:-.venv-xla}
if [[ ! -x "$VENV/bin/python" ]]; then
  "$PY" -m venv "$VENV"
  "$VENV/bin/python" -m pip install -q --upgrade pip setuptools wheel
  if [[ -n "${TORCH_INDEX_URL:-}" ]]; then
    "$VENV/bin/python" -m pip install -q "torch==2.9.0" --index-url "$TORCH_INDEX_URL"
  else
    "$VENV/bin/python" -m pip install -q "torch==2.9.0"
  fi
  "$VENV/bin/python" -m pip install -q "torch_xla==2.9.0"
  "$VENV/bin/python" -m pip install -q .
fi
PJRT_DEVICE=${PJRT_DEVICE:-CPU} "$VENV/bin/python" scripts/xla_smoke.py
