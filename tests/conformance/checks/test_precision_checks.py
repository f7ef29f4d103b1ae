"""The precision checks: every clause is covered, the reference precisions pass, global
torch state is left as found, and every fault-seeded precision is rejected by the check that
names its clause."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
import torch

from tests.conformance.faults.faults_precision import FAULTS, REFERENCE_CAPABILITIES
from trainspec.conformance.checks import precision as prec_checks
from trainspec.conformance.core import Check, CheckFailure, CheckSkipped, Target, checks_for
from trainspec.errors import UnsupportedError
from trainspec.reference import precisions

if TYPE_CHECKING:
    from collections.abc import Iterator

    from trainspec.precision import Precision

CHECKS = checks_for("precision")
BY_NAME = {c.name: c for c in CHECKS}

PASSING: dict[str, Target[Precision]] = {
    name: Target("precision", getattr(precisions, name), name=name, capabilities=capabilities)
    for name, capabilities in REFERENCE_CAPABILITIES.items()
}


def _torch_state() -> tuple[object, ...]:
    return (
        torch.get_default_dtype(),
        torch.is_autocast_enabled("cpu"),
        torch.get_autocast_dtype("cpu"),
        torch.is_autocast_cache_enabled(),
        torch.is_grad_enabled(),
    )


@pytest.fixture(autouse=True)
def _torch_state_is_restored() -> Iterator[None]:
    before = _torch_state()
    yield
    assert _torch_state() == before


def test_every_precision_clause_has_a_check_named_as_a_rule() -> None:
    assert {c.clause for c in CHECKS} == {f"PREC-{i}" for i in range(1, 13)}
    for c in CHECKS:
        assert c.name.startswith("check_precision_") and c.layer == "behaviour"
        assert c.doc.endswith("."), c.name
        assert c.requires <= set(prec_checks.CAPABILITIES)


def test_flag_table_matches_the_reference_classes() -> None:
    for flag, (param, compute) in prec_checks.FLAG_DTYPES.items():
        precision = precisions.precision_for_flag(flag)
        assert (precision.param_dtype, precision.compute_dtype) == (param, compute)


@pytest.mark.parametrize("name", sorted(PASSING))
@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.name)
def test_reference_precisions_pass(name: str, check: Check) -> None:
    target = PASSING[name]
    try:
        check.run(target)
    except CheckSkipped as skipped:
        missing = check.requires - target.capabilities
        expected_skips = {
            # No state to corrupt, or scaling skips are the other check's business.
            "check_precision_load_state_dict_rejects_malformed_state",
            "check_precision_without_scaling_always_steps",
        }
        assert missing or check.name in expected_skips, skipped.reason


@pytest.mark.parametrize("fault", FAULTS, ids=lambda f: f.__name__)
def test_fault_is_rejected_by_the_check_of_its_clause(fault: type[Precision]) -> None:
    clause: str = fault.clause  # type: ignore[attr-defined]
    check = BY_NAME[fault.rejected_by]  # type: ignore[attr-defined]
    assert check.clause == clause
    target: Target[Precision] = Target(
        "precision",
        fault,
        name=fault.__name__,
        capabilities=fault.capabilities,  # type: ignore[attr-defined]
    )
    with pytest.raises(CheckFailure) as caught:
        check.run(target)
    assert caught.value.clause == clause
    message = str(caught.value)
    assert message.startswith(f"{fault.__name__} must ")
    assert f"({clause}); got " in message
    assert "To reproduce:" in message and caught.value.snippet


def test_faults_cover_every_clause() -> None:
    assert {f.clause for f in FAULTS} == {f"PREC-{i}" for i in range(1, 13)}


def test_unsupported_device_skips_device_bound_checks() -> None:
    class MetaRefusingPrecision(precisions.Float32Precision):
        def setup(self, device: torch.device) -> None:
            raise UnsupportedError(f"32-true does not run on {device} here")

    target: Target[Precision] = Target("precision", MetaRefusingPrecision)
    with pytest.raises(CheckSkipped, match="not supported"):
        BY_NAME["check_precision_forward_context_computes_in_compute_dtype"].run(target)
