"""The launcher checks: every clause is covered, the reference multiprocessing launcher passes
with two ranks, and both fault-seeded launchers are rejected by the check of their clause.

Each launcher check starts real processes once (spawn, no torch in the ranks), so this file
runs a handful of launches in all.
"""

from __future__ import annotations

import textwrap
from functools import partial
from typing import TYPE_CHECKING

import pytest

from tests.conformance.faults.faults_launcher import (
    FAULTS,
    LeavesRanksRunningLauncher,
)
from trainspec.conformance.checks import launcher as launcher_checks
from trainspec.conformance.core import Check, CheckFailure, CheckSkipped, Target, checks_for
from trainspec.reference.launchers.spawn import MultiprocessingLauncher

if TYPE_CHECKING:
    from collections.abc import Iterator

    from trainspec.launcher import Launcher

CHECKS = checks_for("launcher")
REFERENCE: Target[Launcher] = Target(
    "launcher",
    partial(MultiprocessingLauncher, 2, "spawn", grace_period=2.0),
    name="MultiprocessingLauncher(2)",
    capabilities=frozenset({"multi_process"}),
    options={"num_processes": 2},
)


@pytest.fixture(autouse=True)
def _no_leaked_ranks() -> Iterator[None]:
    yield
    LeavesRanksRunningLauncher.stop_leftovers()


def test_every_launcher_clause_has_a_check() -> None:
    assert {c.clause for c in CHECKS} == {f"LAUNCH-{i}" for i in range(1, 5)}
    for c in CHECKS:
        assert c.name.startswith("check_launcher_") and c.layer == "behaviour"
        assert c.doc.endswith("."), c.name
    assert set(launcher_checks.CAPABILITIES) == {"multi_process"}


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.name)
def test_reference_launcher_passes_with_two_ranks(check: Check) -> None:
    check.run(REFERENCE)


def test_process_liveness_sees_this_process_as_not_launched() -> None:
    import os

    assert launcher_checks.is_running(os.getpid()) is False
    assert launcher_checks.is_running(os.getppid()) is True


@pytest.mark.parametrize("fault", FAULTS, ids=lambda f: f.__name__)
def test_fault_is_rejected_by_the_check_of_its_clause(fault: type[Launcher]) -> None:
    clause: str = fault.clause  # type: ignore[attr-defined]
    count: int = fault.ranks  # type: ignore[attr-defined]
    capabilities = frozenset({"multi_process"}) if count > 1 else frozenset()
    target: Target[Launcher] = Target(
        "launcher",
        fault,
        name=fault.__name__,
        capabilities=capabilities,
        options={"num_processes": count} if count > 1 else {},
    )
    failures: list[CheckFailure] = []
    for c in CHECKS:
        if c.clause != clause:
            continue
        try:
            c.run(target)
        except CheckFailure as caught:
            failures.append(caught)
        except CheckSkipped:
            pass
    assert failures, f"no {clause} check rejected {fault.__name__}"
    for caught in failures:
        compile(textwrap.dedent(caught.snippet), "<snippet>", "exec")  # valid Python
        assert caught.clause == clause
        assert str(caught).startswith(f"{fault.__name__} must ")
        assert "_launch_targets" in caught.snippet
