"""The trainspec conformance kit: verify that a plugin honours its protocol.

Three ways in, one set of checks:

1. Python: ``report = verify(Target("checkpoint_io", MyIO))`` then ``report.ok``;
2. the command line: ``trainspec verify checkpoint_io my_pkg.io:MyIO``;
3. pytest: ``class TestMyIO(CheckpointIOSuite): factory = MyIO`` (the suites live in
   :mod:`trainspec.conformance.suites`, also importable from here), or
   ``pytest --trainspec-target checkpoint_io=my_pkg.io:MyIO``.

An implementation declares what it can do where it lives: ``conformance_capabilities`` and
``conformance_options`` attributes on its class (or factory function), read by the kit, so
``trainspec verify KIND module:Class`` needs nothing else. Everything the kit knows about a kind
(protocol, clauses, check modules, capability and option vocabularies) is one table,
:mod:`trainspec.conformance.kinds`; verdicts are one pure function,
:mod:`trainspec.conformance.verdict`, whichever executor ran the checks.

Importing this package imports neither torch nor pytest: the behaviour checks are imported
when a kind is first verified, the pytest suites when first accessed.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from trainspec.conformance.core import (
    KINDS,
    LAYERS,
    Check,
    CheckFailure,
    CheckSkipped,
    Kind,
    Layer,
    Target,
    check,
    checks_for,
)
from trainspec.conformance.report import (
    STATUSES,
    CheckResult,
    Report,
    Status,
    Summary,
    TargetReport,
)
from trainspec.conformance.runner import TargetSession, load_target, verify

if TYPE_CHECKING:
    from trainspec.conformance.suites import (
        AcceleratorSuite,
        AsyncCheckpointIOSuite,
        CheckpointIOSuite,
        ClusterEnvironmentSuite,
        CollectiveSuite,
        LauncherSuite,
        PrecisionSuite,
        StrategySuite,
    )

__all__ = [
    "KINDS",
    "LAYERS",
    "STATUSES",
    "AcceleratorSuite",
    "AsyncCheckpointIOSuite",
    "Check",
    "CheckFailure",
    "CheckResult",
    "CheckSkipped",
    "CheckpointIOSuite",
    "ClusterEnvironmentSuite",
    "CollectiveSuite",
    "Kind",
    "LauncherSuite",
    "Layer",
    "PrecisionSuite",
    "Report",
    "Status",
    "StrategySuite",
    "Summary",
    "Target",
    "TargetReport",
    "TargetSession",
    "check",
    "checks_for",
    "load_target",
    "verify",
]

_SUITES = frozenset(
    {
        "AcceleratorSuite",
        "AsyncCheckpointIOSuite",
        "CheckpointIOSuite",
        "ClusterEnvironmentSuite",
        "CollectiveSuite",
        "LauncherSuite",
        "PrecisionSuite",
        "StrategySuite",
    }
)


def __getattr__(name: str) -> object:
    # The pytest suites import pytest; load them only when asked for.
    if name in _SUITES:
        suites = importlib.import_module("trainspec.conformance.suites")
        return getattr(suites, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
