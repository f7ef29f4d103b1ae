"""The accelerator checks: every clause is covered, correct accelerators pass, and every
fault-seeded accelerator is rejected by the check that names its clause."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conformance.faults.faults_accelerator import FAULTS, IndexedFakeAccelerator
from trainspec.conformance.checks import accelerator as acc_checks
from trainspec.conformance.core import Check, CheckFailure, CheckSkipped, Target, checks_for
from trainspec.conformance.hypothesis_strategies import device_requests
from trainspec.errors import ConfigurationError, DeviceUnavailableError
from trainspec.reference.accelerators.cpu import CPUAccelerator
from trainspec.reference.accelerators.device_request import parse_device_request

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    import torch

    from trainspec.accelerator import Accelerator

CHECKS = checks_for("accelerator")
BY_NAME = {c.name: c for c in CHECKS}


def _target(factory: Callable[[], Accelerator], name: str) -> Target[Accelerator]:
    return Target("accelerator", factory, name=name, options={"max_examples": 15})


PASSING: dict[str, Target[Accelerator]] = {
    "CPUAccelerator": _target(CPUAccelerator, "CPUAccelerator"),
    "CPUAccelerator(num_devices=1)": _target(
        lambda: CPUAccelerator(num_devices=1), "CPUAccelerator(num_devices=1)"
    ),
    "IndexedFakeAccelerator": _target(IndexedFakeAccelerator, "IndexedFakeAccelerator"),
    "IndexedFakeAccelerator(count=0)": _target(
        lambda: IndexedFakeAccelerator(count=0), "IndexedFakeAccelerator(count=0)"
    ),
}


@pytest.fixture(autouse=True)
def _restore_environment() -> Iterator[None]:
    before = dict(os.environ)
    yield
    os.environ.clear()
    os.environ.update(before)


def test_every_accelerator_clause_has_a_check_named_as_a_rule() -> None:
    # ACC-1 ... ACC-10, plus the cross-cutting ERR-1 (errors are trainspec errors).
    assert {c.clause for c in CHECKS} == {f"ACC-{i}" for i in range(1, 11)} | {"ERR-1"}
    for c in CHECKS:
        assert c.name.startswith("check_accelerator_") and c.layer == "behaviour"
        assert c.doc.endswith("."), c.name
        assert c.requires <= set(acc_checks.CAPABILITIES)


@pytest.mark.parametrize("name", sorted(PASSING))
@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.name)
def test_correct_accelerators_pass(name: str, check: Check) -> None:
    target = PASSING[name]
    try:
        check.run(target)
    except CheckSkipped as skipped:
        # Only an accelerator without devices may skip (nothing to set up or parse).
        assert target.make().device_count() == 0, skipped.reason


@pytest.mark.parametrize("fault", FAULTS, ids=lambda f: f.__name__)
def test_fault_is_rejected_by_the_check_of_its_clause(fault: type[Accelerator]) -> None:
    clause: str = fault.clause  # type: ignore[attr-defined]
    check = BY_NAME[fault.rejected_by]  # type: ignore[attr-defined]
    assert check.clause == clause
    with pytest.raises(CheckFailure) as caught:
        check.run(_target(fault, fault.__name__))
    assert caught.value.clause == clause
    message = str(caught.value)
    assert message.startswith(f"{fault.__name__} must ")
    assert f"({clause}); got " in message
    assert "To reproduce:" in message and caught.value.snippet


def test_faults_cover_every_clause() -> None:
    assert {f.clause for f in FAULTS} == {f"ACC-{i}" for i in range(1, 11)} | {"ERR-1"}


def test_failure_snippet_imports_the_factory() -> None:
    from tests.conformance.faults.faults_accelerator import ZeroDevicesAcceptedAccelerator

    check = BY_NAME["check_accelerator_rejects_malformed_requests"]
    with pytest.raises(CheckFailure) as caught:
        check.run(Target("accelerator", ZeroDevicesAcceptedAccelerator))
    snippet = caught.value.snippet
    assert "from tests.conformance.faults.faults_accelerator import " in snippet
    assert "acc = ZeroDevicesAcceptedAccelerator()" in snippet
    assert "acc.parse_devices(0)" in snippet


@settings(max_examples=40)
@given(data=st.data(), count=st.integers(0, 5))
def test_device_request_labels_agree_with_the_reference_parser(
    data: st.DataObject, count: int
) -> None:
    case = data.draw(device_requests(count))
    try:
        indices = parse_device_request(case.request, device_type="meta", available=count)
    except ConfigurationError:
        assert case.kind == "malformed" or (case.kind == "too_many" and count == 0), case
        return
    except DeviceUnavailableError:
        assert case.kind in ("too_many", "malformed") and (case.kind == "too_many" or count == 0)
        return
    assert case.kind == "valid", case
    if case.indices is not None:
        assert tuple(indices) == case.indices
    if case.count is not None:
        assert len(indices) == case.count


def test_device_requests_without_devices_have_no_valid_kind() -> None:
    with pytest.raises(ValueError, match="no device requests"):
        device_requests(0, kinds=("valid",))


# ------------------------------------------------------------- root-cause blame (issue 15)


class _NoSynchronize(CPUAccelerator):
    """Correct except that synchronize is not implemented (an ACC-9 fault only)."""

    def synchronize(self, device: torch.device) -> None:
        raise NotImplementedError("synchronize")


def test_a_missing_synchronize_is_blamed_on_acc_9_alone() -> None:
    target = _target(_NoSynchronize, "NoSynchronize")
    failed: set[str] = set()
    for c in CHECKS:
        try:
            c.run(target)
        except CheckFailure as caught:
            failed.add(caught.clause)
        except CheckSkipped:
            pass
    assert "ACC-9" in failed
    assert "ACC-8" not in failed, failed


class _ProbesEnvironment(CPUAccelerator):
    """is_available() sets an environment variable (an ACC-2 fault)."""

    def is_available(self) -> bool:
        os.environ["TRAINSPEC_TEST_PROBED"] = "1"
        return super().is_available()


def test_a_side_effect_is_reported_and_does_not_leak_into_the_callers_process() -> None:
    (acc_2,) = [c for c in CHECKS if c.name == "check_accelerator_is_available_has_no_side_effects"]
    os.environ.pop("TRAINSPEC_TEST_PROBED", None)
    with pytest.raises(CheckFailure) as caught:
        acc_2.run(_target(_ProbesEnvironment, "ProbesEnvironment"))
    assert caught.value.clause == "ACC-2" and "TRAINSPEC_TEST_PROBED" in str(caught.value)
    assert "TRAINSPEC_TEST_PROBED" not in os.environ
