""" "To reproduce" snippets run as printed (issue 15): a sample of fault-seeded plugins fails
its check through the runner, and each failure's snippet, executed in a fresh interpreter,
imports the factory by its path, rebuilds the input and raises an ``AssertionError`` for the
same clause and the same expectation.

All snippets run in one subprocess: starting Python with torch is the slow part here.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from tests.conformance.faults import faults_accelerator, faults_checkpoint_io, faults_precision
from trainspec.conformance import Target, verify
from trainspec.conformance._helpers import value_source
from trainspec.conformance.hypothesis_strategies import assert_checkpoints_equal
from trainspec.conformance.report import repro_snippet

if TYPE_CHECKING:
    from trainspec.conformance.report import CheckResult

ROOT = Path(__file__).resolve().parents[3]
OPTIONS: dict[str, dict[str, object]] = {
    "checkpoint_io": {"max_examples": 10, "atomicity_rounds": 2},
    "accelerator": {"max_examples": 15},
    "precision": {},
}

CKPT = faults_checkpoint_io
SAMPLE: list[tuple[str, type, str]] = [
    *(
        ("checkpoint_io", fault, fault.rejected_by)  # type: ignore[attr-defined]
        for fault in (
            CKPT.DropsDtypesTorchIO,
            CKPT.ClonesTensorsTorchIO,
            CKPT.ContiguousTorchIO,
            CKPT.TuplesAsListsTorchIO,
            CKPT.DropsNonTensorsSafetensorsIO,
            CKPT.NoParentsTorchIO,
            CKPT.MutatingTorchIO,
            CKPT.IgnoresStorageOptionsTorchIO,
            CKPT.RawFileNotFoundTorchIO,
            CKPT.RawDecodeErrorTorchIO,
            CKPT.StrictRemoveTorchIO,
            CKPT.TranslatesInterruptTorchIO,  # CKPT-14: the interrupt found again by location
            CKPT.SwallowsInterruptIO,
        )
    ),
    # hypothesis' smallest failing checkpoint, rebuilt exactly in the snippet
    (
        "checkpoint_io",
        CKPT.ClonesTensorsTorchIO,
        "check_checkpoint_io_round_trips_generated_checkpoints",
    ),
    *(("precision", fault, fault.rejected_by) for fault in faults_precision.FAULTS[:4]),  # type: ignore[attr-defined]
    *(("accelerator", fault, fault.rejected_by) for fault in faults_accelerator.FAULTS[:4]),  # type: ignore[attr-defined]
]

DRIVER = textwrap.dedent(
    """
    import json, sys, traceback
    cases = json.load(open(sys.argv[1]))
    outcomes = {}
    for key, code in cases.items():
        try:
            exec(compile(code, f"<snippet {key}>", "exec"), {"__name__": "__snippet__"})
        except BaseException as error:
            outcomes[key] = {
                "assertion": isinstance(error, AssertionError),
                "type": type(error).__name__,
                "clause": getattr(error, "clause", None),
                "expected": getattr(error, "expected", None),
                "text": traceback.format_exc()[-2000:],
            }
        else:
            outcomes[key] = {"assertion": False, "type": None, "text": "no exception"}
    json.dump(outcomes, open(sys.argv[2], "w"))
    """
)


def _failing_result(kind: str, fault: type, check: str) -> CheckResult:
    capabilities = getattr(fault, "capabilities", frozenset())
    target = Target(
        kind, fault, name=fault.__name__, capabilities=capabilities, options=OPTIONS[kind]
    )
    report = verify(target, select=[check], timeout_s=None)
    failed = [r for r in report.results if r.check == check]
    assert failed and failed[0].status == "failed", (fault.__name__, failed)
    return failed[0]


def test_snippets_of_failing_checks_raise_the_same_failure_when_run_as_printed(
    tmp_path: Path,
) -> None:
    cases: dict[str, str] = {}
    expected: dict[str, CheckResult] = {}
    for kind, fault, check in SAMPLE:
        result = _failing_result(kind, fault, check)
        key = f"{fault.__name__}:{check}"
        code = repro_snippet(result.message)
        assert code, (key, result.message)
        assert f"from {fault.__module__} import {fault.__name__}" in code, code
        assert "factory()" not in code, code  # the factory is imported, never a placeholder
        cases[key] = code
        expected[key] = result
    (tmp_path / "cases.json").write_text(json.dumps(cases), encoding="utf-8")
    (tmp_path / "driver.py").write_text(DRIVER, encoding="utf-8")

    subprocess.run(
        [
            sys.executable,
            str(tmp_path / "driver.py"),
            str(tmp_path / "cases.json"),
            str(tmp_path / "outcomes.json"),
        ],
        cwd=ROOT,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
        check=True,
        timeout=900,
    )

    outcomes = json.loads((tmp_path / "outcomes.json").read_text(encoding="utf-8"))
    for key, result in expected.items():
        outcome = outcomes[key]
        assert outcome["assertion"], (key, outcome["text"])
        assert outcome["clause"] == result.clause, (key, outcome["text"])
        first_line = result.summary_line
        assert f"must {outcome['expected']} ({result.clause})" in first_line, (key, outcome)


def test_value_source_rebuilds_strides_sharing_and_bits_exactly() -> None:
    base = torch.arange(24.0).reshape(4, 6)
    value = {
        "base": base,
        "row": base[1],
        "transposed": base.t(),
        "expanded": torch.ones(3).expand(2, 3),
        "special": torch.tensor([float("nan"), -0.0, float("inf")]),
        "bf16": torch.arange(3.0).bfloat16(),
        "flags": torch.tensor([True, False]),
        "empty": torch.empty(0, 3),
        "python": (1, [2.5, None], "s", True, float("-inf")),
        "parameter": torch.nn.Parameter(torch.ones(2)),
    }
    namespace: dict[str, object] = {"torch": torch}

    exec(value_source(value, "checkpoint"), namespace)

    rebuilt = namespace["checkpoint"]
    assert isinstance(rebuilt, dict)
    assert rebuilt["base"] is not base
    assert_checkpoints_equal(value, rebuilt)  # strides, sharing (row is a view of base), bits


def test_a_factory_is_imported_by_its_path_only_when_that_gives_it_back() -> None:
    import functools

    from trainspec.conformance._helpers import importable_path
    from trainspec.reference.checkpoint_io import TorchCheckpointIO

    def tracked() -> object:  # what the runner wraps around a factory
        return TorchCheckpointIO()

    tracked.__wrapped__ = TorchCheckpointIO  # type: ignore[attr-defined]

    module, qualname = importable_path(TorchCheckpointIO) or ("", "")
    assert f"{module}:{qualname}".endswith(":TorchCheckpointIO")
    assert importable_path(tracked) == (module, qualname)
    assert importable_path(lambda: TorchCheckpointIO()) is None
    assert importable_path(functools.partial(TorchCheckpointIO)) is None
    assert importable_path(tracked.__code__) is None
