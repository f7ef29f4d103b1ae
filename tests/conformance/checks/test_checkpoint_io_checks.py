"""The checkpoint IO checks: every clause is covered, the reference IOs (and the in-test
asynchronous baseline) pass, and every fault-seeded IO is rejected by the check that names its
clause."""

from __future__ import annotations

import io
import re
import threading
from typing import TYPE_CHECKING, TypeVar

import pytest
import torch
from hypothesis import Phase, given, settings

from tests.conformance.faults.faults_checkpoint_io import (
    ASYNC,
    FAULTS,
    FLAT,
    FULL,
    MEMORY,
    MiniAsyncCheckpointIO,
)
from trainspec.conformance.checks import checkpoint_io as ckpt_checks
from trainspec.conformance.core import Check, CheckFailure, CheckSkipped, Target, checks_for
from trainspec.conformance.strategies import (
    CheckpointMismatch,
    assert_checkpoints_equal,
    state_dicts,
    supported_dtypes,
    tensors,
)
from trainspec.reference.checkpoint_io import (
    BackgroundCheckpointIO,
    MemoryCheckpointIO,
    SafetensorsCheckpointIO,
    TorchCheckpointIO,
)
from trainspec.reference.checkpoint_io.safetensors_io import SUPPORTED_DTYPES

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Mapping

    from hypothesis.strategies import SearchStrategy

    from trainspec.checkpoint_io import CheckpointIO
    from trainspec.types import Checkpoint

_V = TypeVar("_V")

CHECKS = checks_for("checkpoint_io")
BY_NAME = {c.name: c for c in CHECKS}
CLAUSES = {f"CKPT-{i}" for i in range(1, 13)} | {f"ACKPT-{i}" for i in range(1, 6)}
FAST = {"max_examples": 10, "atomicity_rounds": 6}


def _target(
    name: str,
    factory: Callable[[], CheckpointIO],
    capabilities: frozenset[str],
    **options: object,
) -> Target[CheckpointIO]:
    return Target(
        "checkpoint_io",
        factory,
        name=name,
        capabilities=capabilities,
        options={**FAST, **options},
    )


def _trusted() -> CheckpointIO:
    return TorchCheckpointIO(weights_only=False)


PASSING: dict[str, Target[CheckpointIO]] = {
    "TorchCheckpointIO": _target(
        "TorchCheckpointIO", TorchCheckpointIO, FULL, trusted_factory=_trusted
    ),
    "TorchCheckpointIO@memory://": _target(
        "TorchCheckpointIO@memory://", TorchCheckpointIO, FULL, base_path="memory://conformance"
    ),
    "MemoryCheckpointIO": _target("MemoryCheckpointIO", MemoryCheckpointIO, MEMORY),
    "SafetensorsCheckpointIO": _target(
        "SafetensorsCheckpointIO",
        SafetensorsCheckpointIO,
        FLAT,
        dtypes=[d for d in supported_dtypes("cpu") if d in SUPPORTED_DTYPES],
    ),
    "BackgroundCheckpointIO": _target("BackgroundCheckpointIO", BackgroundCheckpointIO, ASYNC),
    "MiniAsyncCheckpointIO": _target("MiniAsyncCheckpointIO", MiniAsyncCheckpointIO, ASYNC),
}

# Why a correct target may skip a check, besides an undeclared capability.
ALLOWED_SKIPS = re.compile(
    "capability not declared|base_path is a URL|no 'trusted_factory' option|"
    "declares python_objects|with an unserialisable value succeeded"
)


@pytest.fixture(autouse=True)
def _no_threads_left_behind() -> Iterator[None]:
    before = set(threading.enumerate())
    yield
    left = [t for t in threading.enumerate() if t not in before and t.is_alive()]
    for thread in left:  # executors finish their last job before exiting
        thread.join(timeout=10)
    assert not [t.name for t in left if t.is_alive()]


def test_every_checkpoint_io_clause_has_a_check_named_as_a_rule() -> None:
    assert {c.clause for c in CHECKS} == CLAUSES
    for c in CHECKS:
        prefix = (
            "check_async_checkpoint_io_" if c.clause.startswith("A") else "check_checkpoint_io_"
        )
        assert c.name.startswith(prefix) and c.layer == "behaviour", c.name
        assert c.doc.endswith("."), c.name
        assert c.requires <= set(ckpt_checks.CAPABILITIES)
        assert ("async" in c.requires) == c.clause.startswith("ACKPT-")


@pytest.mark.parametrize("name", sorted(PASSING))
@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.name)
def test_correct_checkpoint_ios_pass(name: str, check: Check) -> None:
    try:
        check.run(PASSING[name])
    except CheckSkipped as skipped:
        assert ALLOWED_SKIPS.search(skipped.reason), skipped.reason


@pytest.mark.parametrize("fault", FAULTS, ids=lambda f: f.__name__)
def test_fault_is_rejected_by_the_check_of_its_clause(fault: type[CheckpointIO]) -> None:
    clause: str = fault.clause  # type: ignore[attr-defined]
    check = BY_NAME[fault.rejected_by]  # type: ignore[attr-defined]
    assert check.clause == clause
    target = _target(fault.__name__, fault, fault.capabilities)  # type: ignore[attr-defined]
    with pytest.raises(CheckFailure) as caught:
        check.run(target)
    assert caught.value.clause == clause
    message = str(caught.value)
    assert message.startswith(f"{fault.__name__} must ")
    assert f"({clause}); got " in message
    assert "To reproduce:" in message and caught.value.snippet


def test_faults_cover_every_clause() -> None:
    assert {f.clause for f in FAULTS} == CLAUSES  # type: ignore[attr-defined]
    assert len(FAULTS) >= 22


def test_in_place_writer_is_also_caught_by_a_concurrent_reader_or_passes_honestly() -> None:
    # The concurrent-reader check is probabilistic for an in-place writer; it must never
    # report anything but a CKPT-3 failure (no crash, no hang).
    from tests.conformance.faults.faults_checkpoint_io import InPlaceTorchIO

    check = BY_NAME["check_checkpoint_io_concurrent_reader_sees_old_or_new_checkpoint"]
    try:
        check.run(_target("InPlaceTorchIO", InPlaceTorchIO, FULL))
    except CheckFailure as caught:
        assert caught.clause == "CKPT-3"


def test_generated_round_trip_shrinks_to_a_minimal_failing_checkpoint() -> None:
    from tests.conformance.faults.faults_checkpoint_io import DropsDtypesTorchIO

    check = BY_NAME["check_checkpoint_io_round_trips_generated_checkpoints"]
    target = _target("DropsDtypesTorchIO", DropsDtypesTorchIO, FULL, dtypes=[torch.float64])
    with pytest.raises(CheckFailure) as caught:
        check.run(target)
    assert caught.value.clause == "CKPT-1"
    assert "dtype torch.float64 != torch.float32" in caught.value.actual


def test_unsafe_payload_runs_only_when_unpickled() -> None:
    import copy
    import pickle

    payload = ckpt_checks.UnsafePayload("token-for-test")
    before = len(ckpt_checks.executed_payloads())
    copied = copy.deepcopy(payload)
    assert isinstance(copied, ckpt_checks.UnsafePayload)
    assert len(ckpt_checks.executed_payloads()) == before
    assert pickle.loads(pickle.dumps(payload)) == "token-for-test"
    assert ckpt_checks.executed_payloads()[-1] == "token-for-test"


def test_options_are_validated() -> None:
    check = BY_NAME["check_checkpoint_io_round_trips_every_dtype"]
    bad: Mapping[str, object] = {"dtypes": ["float32"]}
    with pytest.raises(TypeError, match="dtypes"):
        check.run(Target("checkpoint_io", TorchCheckpointIO, options=bad))


# --------------------------------------------------------------------------- strategies & equality


def _round_trip(checkpoint: object) -> object:
    buffer = io.BytesIO()
    torch.save(checkpoint, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=True)


@settings(max_examples=30)
@given(state_dicts())
def test_generated_checkpoints_equal_their_torch_save_round_trip(checkpoint: Checkpoint) -> None:
    loaded = _round_trip(checkpoint)
    assert loaded is not checkpoint
    assert_checkpoints_equal(checkpoint, loaded)


def _samples(strategy: SearchStrategy[_V], count: int) -> list[_V]:
    """``count`` generated values, without shrinking: what the kit's budgets draw from."""
    found: list[_V] = []

    @settings(max_examples=count, phases=[Phase.generate], derandomize=True, database=None)
    @given(strategy)
    def collect(value: _V) -> None:
        found.append(value)

    collect()
    return found


def test_generated_tensors_cover_every_dtype_and_layout() -> None:
    drawn = _samples(tensors(max_side=3), 400)
    for dtype in supported_dtypes("cpu"):
        assert any(t.dtype == dtype for t in drawn), dtype
    assert any(t.dim() == 0 for t in drawn)
    assert any(t.numel() == 0 for t in drawn)
    assert any(t.dim() >= 2 and not t.is_contiguous() for t in drawn)
    assert any(t.untyped_storage().nbytes() > t.numel() * t.element_size() > 0 for t in drawn)
    floats = _samples(tensors([torch.float32]), 100)
    assert any(bool(torch.isnan(t).any()) and bool(torch.isfinite(t).any()) for t in floats)
    checkpoints = _samples(state_dicts(), 50)
    assert any(any(k.startswith("__view") for k in c) for c in checkpoints)


def _base() -> Checkpoint:
    weight = torch.tensor([[1.0, float("nan")], [-0.0, 2.0]])
    return {"w": weight, "row": weight[1], "t": (1, [True]), "f": float("nan")}


@pytest.mark.parametrize(
    ("change", "difference"),
    [
        (lambda c: c.__setitem__("w", c["w"].clone()), "share storage in the original"),
        (lambda c: c["w"].__setitem__((0, 1), 0.0), "values differ"),
        (lambda c: c["w"].__setitem__((1, 0), 0.0), "values differ"),
        (lambda c: c.__setitem__("w", c["w"].t().contiguous().t()), "stride"),
        (lambda c: c.__setitem__("w", c["w"].double()), "dtype"),
        (lambda c: c.__setitem__("t", [1, [True]]), "type tuple != list"),
        (lambda c: c.__setitem__("t", (1, [1])), "type bool != int"),
        (lambda c: c.__setitem__("f", 0.0), "nan != 0.0"),
        (lambda c: c.pop("f"), "keys differ"),
    ],
)
def test_checkpoint_equality_sees_every_kind_of_difference(
    change: Callable[[Checkpoint], object], difference: str
) -> None:
    expected = _base()
    actual = _round_trip(expected)
    assert_checkpoints_equal(expected, actual)
    assert isinstance(actual, dict)
    change(actual)
    with pytest.raises(CheckpointMismatch) as caught:
        assert_checkpoints_equal(expected, actual)
    assert any(difference in d for d in caught.value.differences), caught.value.differences
