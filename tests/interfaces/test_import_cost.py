"""``import trainspec`` loads the contracts only: no torch, no implementation, no kit."""

from __future__ import annotations

import json
import subprocess
import sys

HEAVY = ("torch", "numpy", "hypothesis", "trainspec.reference", "trainspec.conformance")


def test_import_trainspec_imports_no_torch() -> None:
    """One fresh interpreter: ``-X importtime`` shows every import, ``sys.modules`` what stayed."""
    code = "import json, sys, trainspec; print(json.dumps(sorted(sys.modules)))"
    result = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    import_lines = [line for line in result.stderr.splitlines() if line.startswith("import time:")]
    assert any(line.rstrip().endswith("trainspec") for line in import_lines), result.stderr
    assert not [line for line in import_lines if "torch" in line]
    modules = json.loads(result.stdout)
    loaded = [m for m in modules if any(m == h or m.startswith(h + ".") for h in HEAVY)]
    assert not loaded, f"import trainspec must not import {loaded}"
