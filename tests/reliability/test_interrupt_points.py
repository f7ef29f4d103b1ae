"""Ctrl-C at every point of a save or a load where CPython can raise it (CKPT-3).

Runs ``scripts/interrupt_every_point.py`` once for the module (one extra Python that imports
torch; each point is a fork of it). For each scenario, ``KeyboardInterrupt`` is raised in
turn at every interrupt point of the operation (every Python function entry and every return
from C, as ``sys.setprofile`` reports them): the operation must raise it itself, the process
must survive its garbage collection, the path must hold the old or the new checkpoint, and no
temporary file may be left. Found with it and fixed: an interrupt lost in the finalizer of the
writer torch.save wrote through (the rare hung SIGINT soak writer), a process abort when an
unfinished torch writer was destroyed after its file was closed, a ``RuntimeError`` hiding the
interrupt in the background IO's condition wait, a leaked lock that hung its ``teardown``, an
interrupt lost in ``ZipFile.__del__`` during the checksum check, and a double close of a
checkpoint's descriptor during ``open``. The two fault scenarios prove the harness fails.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "interrupt_every_point.py"
SCENARIOS = (
    "torch",
    "safetensors",
    "background",
    "memory",
    "torch-load",
    "safetensors-load",
    "memory-load",
)
FAULTS = ("fault-finalizer", "fault-destructor")
pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="needs fork")


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> dict[str, dict]:
    done = subprocess.run(
        [
            *(sys.executable, str(SCRIPT), "--json", "--dir", str(tmp_path_factory.mktemp("i"))),
            *("--scenarios", ",".join(SCENARIOS + FAULTS)),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.stdout.strip(), f"the script printed nothing; stderr:\n{done.stderr[-3000:]}"
    report = json.loads(done.stdout.strip().splitlines()[-1])
    return {r["scenario"]: r | {"exit_code": done.returncode} for r in report["results"]}


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_an_interrupt_at_any_point_propagates_and_leaves_old_or_new(results, scenario):
    result = results[scenario]
    assert result["failures"] == [], result["failures"][:10]
    # Not vacuous: the operation has many points, and nearly all of them were reached.
    assert result["points"] >= 50, result
    assert result["interrupted"] >= result["points"] - 2, result


def test_the_harness_sees_an_interrupt_lost_in_a_finalizer(results):
    failures = results["fault-finalizer"]["failures"]
    assert any("the interrupt was swallowed" in f for f in failures), failures[:10]


def test_the_harness_sees_a_process_killed_by_a_late_writer_destructor(results):
    failures = results["fault-destructor"]["failures"]
    assert any("the process died (signal SIGABRT)" in f for f in failures), failures[:10]


def test_the_script_exits_nonzero_when_a_point_failed(results):
    assert {r["exit_code"] for r in results.values()} == {1}  # the fault scenarios failed
