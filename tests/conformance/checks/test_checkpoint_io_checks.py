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
    CKPT_6_FAULTS,
    CKPT_13_FAULTS,
    FAULTS,
    FLAT,
    FULL,
    MEMORY,
    MiniAsyncCheckpointIO,
)
from trainspec.conformance.checks import checkpoint_io as ckpt_checks
from trainspec.conformance.core import Check, CheckFailure, CheckSkipped, Target, checks_for
from trainspec.conformance.hypothesis_strategies import (
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
    from pathlib import Path

    from hypothesis.strategies import SearchStrategy

    from trainspec.checkpoint_io import CheckpointIO
    from trainspec.types import Checkpoint, PathLike

_V = TypeVar("_V")

CHECKS = checks_for("checkpoint_io")
BY_NAME = {c.name: c for c in CHECKS}
CLAUSES = {f"CKPT-{i}" for i in range(1, 15)} | {f"ACKPT-{i}" for i in range(1, 6)}
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
    "declares python_objects|with an unserialisable value succeeded|inconclusive|"
    "no writable directory on a file system other than"
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
    options = getattr(fault, "conformance_options", {})  # what make_target would read
    target = _target(fault.__name__, fault, fault.capabilities, **options)  # type: ignore[attr-defined]
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


# --------------------------------------------------------------------------- CKPT-3 (issue 15)

KILL = "check_checkpoint_io_killed_save_leaves_old_or_new_checkpoint"
OTHER_FS = "check_checkpoint_io_saves_are_atomic_on_another_file_system_than_tmpdir"


def test_a_third_party_atomic_io_passes_the_atomicity_checks() -> None:
    from tests.conformance.faults.faults_checkpoint_io import PlainAtomicIO

    target = _target("PlainAtomicIO", PlainAtomicIO, frozenset({"local_paths"}))
    for name in (KILL, OTHER_FS):
        BY_NAME[name].run(target)


@pytest.mark.parametrize(
    "name", ["PlainInPlaceIO", "InPlaceTorchIO", "StagesInTmpdirMoveTorchIO", "RemovesFirstTorchIO"]
)
def test_the_kill_check_rejects_writers_that_are_not_atomic(name: str) -> None:
    from tests.conformance.faults import faults_checkpoint_io

    fault = getattr(faults_checkpoint_io, name)
    with pytest.raises(CheckFailure) as caught:
        BY_NAME[KILL].run(_target(name, fault, frozenset({"local_paths"})))
    assert caught.value.clause == "CKPT-3"
    assert "SIGKILL" in caught.value.actual or "failed" in caught.value.actual


def test_staging_in_tmpdir_is_caught_on_another_file_system() -> None:
    from tests.conformance.faults.faults_checkpoint_io import StagesInTmpdirReplaceTorchIO

    target = _target("StagesInTmpdirReplaceTorchIO", StagesInTmpdirReplaceTorchIO, FULL)
    BY_NAME["check_checkpoint_io_concurrent_reader_sees_old_or_new_checkpoint"].run(target)
    with pytest.raises(CheckFailure) as caught:
        BY_NAME[OTHER_FS].run(target)
    assert "another file system" in caught.value.expected


def test_the_kill_check_skips_a_factory_a_child_process_cannot_import() -> None:
    target = _target("lambda", lambda: TorchCheckpointIO(), FULL)
    with pytest.raises(CheckSkipped, match="not importable"):
        BY_NAME[KILL].run(target)


def test_the_other_file_system_differs_from_tmpdir() -> None:
    import os
    import tempfile

    target = _target("TorchCheckpointIO", TorchCheckpointIO, FULL)
    with ckpt_checks._other_file_system(target) as other:
        if other is None:
            pytest.skip("no second file system on this machine")
        assert os.stat(other.root).st_dev != os.stat(tempfile.gettempdir()).st_dev


# --------------------------------------------------------------------------- CKPT-6 (issue 15)

REFUSAL_CHECKS = [c for c in CHECKS if c.name.startswith("check_checkpoint_io_refused_")]


def test_every_stage_of_a_write_has_a_refusal_check() -> None:
    names = {c.name for c in REFUSAL_CHECKS}
    for stage in ("open", "write", "fsync", "rename"):
        assert f"check_checkpoint_io_refused_{stage}_raises_write_error_and_keeps_the_old" in names


@pytest.mark.parametrize("check", REFUSAL_CHECKS, ids=lambda c: c.name)
def test_a_third_party_atomic_io_passes_every_refusal_check(check: Check) -> None:
    from tests.conformance.faults.faults_checkpoint_io import PlainAtomicIO

    try:
        check.run(_target("PlainAtomicIO", PlainAtomicIO, frozenset({"local_paths"})))
    except CheckSkipped as skipped:  # only the path-based check could skip, and it does not
        raise AssertionError(skipped.reason) from None


@pytest.mark.parametrize(
    "name", ["TorchCheckpointIO", "BackgroundCheckpointIO", "SafetensorsCheckpointIO"]
)
def test_the_reference_ios_meet_every_injected_refusal(name: str) -> None:
    # Not inconclusive: the reference IOs open, write, fsync and rename through Python calls.
    for check in REFUSAL_CHECKS:
        check.run(PASSING[name])


@pytest.mark.parametrize("fault", CKPT_6_FAULTS, ids=lambda f: f.__name__)
def test_a_mishandled_refusal_is_rejected(fault: type[CheckpointIO]) -> None:
    check = BY_NAME[fault.rejected_by]  # type: ignore[attr-defined]
    with pytest.raises(CheckFailure) as caught:
        check.run(_target(fault.__name__, fault, fault.capabilities))  # type: ignore[attr-defined]
    assert caught.value.clause == "CKPT-6"
    assert "refused" in caught.value.actual
    assert "To reproduce:" in str(caught.value)


def test_a_save_that_never_meets_a_refusal_is_inconclusive_not_passed() -> None:
    from tests.conformance.faults.faults_checkpoint_io import PlainAtomicIO

    class NoFsyncIO(PlainAtomicIO):
        def sync(self, fd: int) -> None:
            return None

    check = BY_NAME["check_checkpoint_io_refused_fsync_raises_write_error_and_keeps_the_old"]
    with pytest.raises(CheckSkipped, match="inconclusive"):
        check.run(_target("NoFsyncIO", NoFsyncIO, frozenset({"local_paths"})))


def test_injected_refusals_stay_inside_their_directory(tmp_path: Path) -> None:
    from trainspec.conformance._storage_refusals import refusing

    inside, outside = tmp_path / "inside", tmp_path / "outside"
    inside.mkdir()
    outside.mkdir()
    with refusing("open", str(inside)) as refusals:
        (outside / "f").write_bytes(b"ok")
        with pytest.raises(PermissionError):
            (inside / "f").write_bytes(b"refused")
    assert refusals.fired == 1
    (inside / "f").write_bytes(b"ok again")  # the patches are gone


# --------------------------------------------------------------------------- CKPT-13 (issue 17)

SPECIAL_FILE_CHECKS = [c for c in CHECKS if c.clause == "CKPT-13"]


@pytest.mark.parametrize("check", SPECIAL_FILE_CHECKS, ids=lambda c: c.name)
def test_a_third_party_io_that_refuses_special_files_passes(check: Check) -> None:
    from tests.conformance.faults.faults_checkpoint_io import SpecialFileSafeIO

    check.run(_target("SpecialFileSafeIO", SpecialFileSafeIO, frozenset({"local_paths"})))


def test_the_kit_never_touches_real_device_nodes() -> None:
    import os

    before = os.stat("/dev/null")
    for fault in CKPT_13_FAULTS:
        with pytest.raises(CheckFailure):
            BY_NAME[fault.rejected_by].run(  # type: ignore[attr-defined]
                _target(fault.__name__, fault, fault.capabilities)  # type: ignore[attr-defined]
            )
    after = os.stat("/dev/null")
    assert (after.st_ino, after.st_rdev, after.st_mode) == (
        before.st_ino,
        before.st_rdev,
        before.st_mode,
    )


def test_special_file_checks_skip_stores_that_are_not_local() -> None:
    target = _target("MemoryCheckpointIO", MemoryCheckpointIO, MEMORY)
    for check in SPECIAL_FILE_CHECKS:
        with pytest.raises(CheckSkipped, match="capability not declared: local_paths"):
            check.run(target)


def test_an_ignored_fsync_of_another_file_is_not_a_swallowed_refusal() -> None:
    # A correct IO may fsync a side file and ignore its failure; only the checkpoint's own
    # data must not be left undurable.
    import os

    from tests.conformance.faults.faults_checkpoint_io import PlainAtomicIO

    class SideFileIO(PlainAtomicIO):
        def save_checkpoint(self, checkpoint, path, storage_options=None):  # type: ignore[no-untyped-def]
            side = os.path.join(os.path.dirname(os.path.abspath(path)), "journal")
            os.makedirs(os.path.dirname(side), exist_ok=True)
            with open(side, "ab") as file:
                file.write(b"saving\n")
                try:
                    os.fsync(file.fileno())
                except OSError:
                    pass  # the journal is advisory
            super().save_checkpoint(checkpoint, path, storage_options)

        def sync(self, fd: int) -> None:
            return None  # no fsync of the data: CKPT-6 does not demand one

    check = BY_NAME["check_checkpoint_io_refused_fsync_raises_write_error_and_keeps_the_old"]
    check.run(_target("SideFileIO", SideFileIO, frozenset({"local_paths"})))


# --------------------------------------------------------------- ACKPT-1: the path (issue 17)

RELATIVE_PATH_CHECK = "check_async_checkpoint_io_resolves_a_relative_path_at_call_time"


class ResolvesAtWriteTimeAsyncIO(MiniAsyncCheckpointIO):
    """Queues a relative path as given: the worker resolves it against the working directory
    at write time (issue 17 item 8)."""

    def resolve(self, path: PathLike) -> PathLike:
        return path


class RaisingAsyncIO(MiniAsyncCheckpointIO):
    """Refuses every save at the call."""

    def save_checkpoint(self, checkpoint, path, storage_options=None):  # type: ignore[no-untyped-def]
        raise OSError("refused")


def test_an_async_io_that_resolves_at_write_time_is_rejected() -> None:
    import os

    before = os.getcwd()
    target = _target("ResolvesAtWriteTimeAsyncIO", ResolvesAtWriteTimeAsyncIO, ASYNC)
    with pytest.raises(CheckFailure, match="working directory at write time") as caught:
        BY_NAME[RELATIVE_PATH_CHECK].run(target)
    assert caught.value.clause == "ACKPT-1"
    assert "To reproduce:" in str(caught.value)
    assert os.getcwd() == before


@pytest.mark.parametrize("make", [BackgroundCheckpointIO, MiniAsyncCheckpointIO])
def test_an_async_io_that_resolves_at_the_call_passes(make: Callable[[], CheckpointIO]) -> None:
    import os

    before = os.getcwd()
    BY_NAME[RELATIVE_PATH_CHECK].run(_target(make.__name__, make, ASYNC))
    assert os.getcwd() == before


def test_the_working_directory_is_restored_when_the_save_raises() -> None:
    import os

    before = os.getcwd()
    with pytest.raises(OSError, match="refused"):
        BY_NAME[RELATIVE_PATH_CHECK].run(_target("RaisingAsyncIO", RaisingAsyncIO, ASYNC))
    assert os.getcwd() == before


def test_the_relative_path_check_skips_stores_that_are_not_local() -> None:
    check = BY_NAME[RELATIVE_PATH_CHECK]
    with pytest.raises(CheckSkipped, match="base_path is a URL"):
        check.run(
            _target(
                "BackgroundCheckpointIO@memory://",
                BackgroundCheckpointIO,
                ASYNC,
                base_path="memory://conformance",
            )
        )
    with pytest.raises(CheckSkipped, match="capability not declared: local_paths"):
        check.run(_target("BackgroundCheckpointIO", BackgroundCheckpointIO, frozenset({"async"})))


def test_a_hung_async_io_does_not_keep_the_kit_in_its_working_directory(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import os

    from trainspec.conformance.checks.checkpoint_io import async_io

    release = threading.Event()

    class HangingAsyncIO(MiniAsyncCheckpointIO):
        def wait(self) -> None:
            release.wait()
            super().wait()

    monkeypatch.setattr(async_io, "_CWD_GUARD_S", 0.2)
    before = os.getcwd()
    try:
        with pytest.raises(CheckFailure, match="had not returned") as caught:
            BY_NAME[RELATIVE_PATH_CHECK].run(_target("HangingAsyncIO", HangingAsyncIO, ASYNC))
        assert caught.value.clause == "ACKPT-1"
        assert os.getcwd() == before, "the working directory is restored while the IO hangs"
    finally:
        release.set()


INTERRUPTED_SAVE = "check_checkpoint_io_interrupted_save_raises_the_interrupt"
INTERRUPTED_LOAD = "check_checkpoint_io_interrupted_load_raises_the_interrupt"


@pytest.mark.parametrize("check", [INTERRUPTED_SAVE, INTERRUPTED_LOAD])
@pytest.mark.parametrize("name", ["NamedTemporaryFileIO", "FsspecExistsIO"])
def test_third_party_ios_pass_the_interrupt_checks_at_every_point(name: str, check: str) -> None:
    # They lose some interrupts outside their package -- in tempfile's __del__, in fsspec's
    # bare except (the load then raises CheckpointNotFoundError): undecided, not failures.
    from tests.conformance.faults import faults_checkpoint_io

    io = getattr(faults_checkpoint_io, name)
    target = _target(name, io, frozenset({"local_paths"}))
    BY_NAME[check].run(_with(target, interrupt_points=0))


def test_handing_torch_save_an_open_file_aborts_at_some_interrupt_points() -> None:
    # The common `with open(...) as f: torch.save(obj, f)` pattern: torch's unfinished writer
    # writes into the closed file when it is freed, and the process aborts.
    from tests.conformance.faults.faults_checkpoint_io import PlainAtomicIO

    target = _target("PlainAtomicIO", PlainAtomicIO, frozenset({"local_paths"}))
    with pytest.raises(CheckFailure) as caught:
        BY_NAME[INTERRUPTED_SAVE].run(_with(target, interrupt_points=0))
    assert "SIGABRT" in caught.value.actual and "torch.serialization" in caught.value.actual


def _with(target: Target[CheckpointIO], **options: object) -> Target[CheckpointIO]:
    return Target(
        target.kind,
        target.factory,
        name=target.name,
        capabilities=target.capabilities,
        options={**target.options, **options},
    )


def test_interrupt_points_sample_the_implementations_own_code_first() -> None:
    from trainspec.conformance.checks.checkpoint_io.interrupts import _points

    every = list(range(1, 1001))
    assert _points(every[:10], (), 0) == every[:10]  # 0: every point
    assert _points(every[:10], (), 32) == every[:10]  # fewer than the limit: every point
    own = tuple(range(100, 200))
    chosen = _points(every, own, 32)
    assert len(chosen) == 32 and chosen == sorted(set(chosen))
    assert len([p for p in chosen if p in own]) == 16  # half the budget in its own code
    assert {1, 1000, 100, 199} <= set(chosen)  # the ends of both ranges
    assert _points(every, (5,), 32).count(5) == 1 and len(_points(every, (5,), 32)) == 32
    without_imports = [p for p in every if not 500 <= p < 600]  # points inside an import
    assert not set(_points(without_imports, own, 0)) & set(range(500, 600))


def test_the_interrupt_check_refuses_a_negative_point_limit() -> None:
    with pytest.raises(TypeError, match="interrupt_points"):
        BY_NAME[INTERRUPTED_SAVE].run(
            _target("TorchCheckpointIO", TorchCheckpointIO, FULL, interrupt_points=-1)
        )
