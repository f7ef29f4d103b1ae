"""CKPT-3: saves are atomic. A failed save keeps the previous checkpoint, a save leaves no
temporary files, a concurrent reader sees the old checkpoint or the new one, a save killed with
SIGKILL at random points leaves one of them, and all of it holds with the checkpoint directory
on another file system than ``$TMPDIR``."""

from __future__ import annotations

import contextlib
import os
import random
import threading
import time
from typing import TYPE_CHECKING, Final, NoReturn, SupportsIndex

import torch

from trainspec.conformance._checkpoint_kill import KillServer, KillServerError, kill_checkpoints
from trainspec.conformance._helpers import (
    checkpoint_differences,
    describe_exception,
    describe_value,
    failure,
    int_option,
)
from trainspec.conformance.checks.checkpoint_io._fixtures import (
    _big,
    _caps,
    _dtypes,
    _equal_or_fail,
    _forkable_factory,
    _io_snippet,
    _Location,
    _location,
    _no_other_file_system,
    _opened,
    _other_file_system,
    _require_local,
    _sample,
    _save,
    _Target,
)
from trainspec.conformance.core import CheckFailure, CheckSkipped, check

if TYPE_CHECKING:
    from collections.abc import Sequence

    from trainspec.types import Checkpoint

# --------------------------------------------------------------------------- CKPT-3


class ExplodingValueError(Exception):
    """Raised by :class:`_ExplodingValue` when something tries to serialise or copy it."""


class _ExplodingValue:
    """A value whose serialisation fails part-way through a save."""

    def __reduce_ex__(self, protocol: SupportsIndex) -> NoReturn:
        raise ExplodingValueError("this value cannot be serialised (conformance check)")

    def __deepcopy__(self, memo: object) -> NoReturn:
        raise ExplodingValueError("this value cannot be copied (conformance check)")

    def __repr__(self) -> str:
        return "<value whose pickling raises>"


class _ExplodingTensor(torch.Tensor):
    """A tensor whose serialisation fails part-way through a save."""

    def __reduce_ex__(self, protocol: SupportsIndex) -> NoReturn:
        raise ExplodingValueError("this tensor cannot be serialised (conformance check)")

    def __deepcopy__(self, memo: object) -> NoReturn:
        raise ExplodingValueError("this tensor cannot be copied (conformance check)")


def _failing_checkpoint(target: _Target) -> Checkpoint:
    # A real tensor first, so that a non-atomic writer has already written (or truncated).
    checkpoint = _big(3.0, megabytes=1)
    if "python_objects" in _caps(target):
        checkpoint["zz_exploding"] = _ExplodingValue()
    else:
        checkpoint["zz_exploding"] = torch.ones(4).as_subclass(_ExplodingTensor)
    return checkpoint


@check("CKPT-3", "checkpoint_io")
def check_checkpoint_io_failed_save_leaves_previous_checkpoint_intact(target: _Target) -> None:
    """A save that fails part-way leaves the previous checkpoint intact.

    A save that fails part-way (a value whose pickling raises) leaves the previous
    checkpoint loadable and unchanged.
    """
    with _location(target) as where:
        _failed_save_leaves_previous_intact(target, where)


def _failed_save_leaves_previous_intact(target: _Target, where: _Location) -> None:
    previous = _sample(target, 8)
    with _opened(target) as io:
        path = where.path("intact.ckpt")
        _save(io, previous, path)
        repro = _io_snippet(
            target,
            """
            class Boom:
                def __reduce_ex__(self, protocol):
                    raise RuntimeError("boom")
            io.save_checkpoint({"w": torch.ones(2)}, path)
            try:
                io.save_checkpoint({"w": torch.zeros(2**20), "boom": Boom()}, path)
            except Exception:
                pass
            print(io.load_checkpoint(path))  # expected the first checkpoint
            """,
        )
        try:
            _save(io, _failing_checkpoint(target), path)
        except Exception:
            pass
        else:
            raise CheckSkipped("the save with an unserialisable value succeeded; nothing failed")
        try:
            loaded = io.load_checkpoint(path)
        except Exception as exc:
            raise failure(
                target,
                "CKPT-3",
                expected="leave the previous checkpoint intact when a save fails part-way",
                actual=f"loading afterwards raised {describe_exception(exc)}",
                hint="Write to a temporary file in the same directory and os.replace() it over "
                "the target only after the write succeeded.",
                snippet=repro,
            ) from exc
        _equal_or_fail(
            target,
            "CKPT-3",
            previous,
            loaded,
            what="leave the previous checkpoint unchanged when a save fails part-way",
            repro=repro,
        )


@check("CKPT-3", "checkpoint_io", requires=("local_paths",))
def check_checkpoint_io_save_leaves_no_temporary_files(target: _Target) -> None:
    """Saves leave no temporary file next to the checkpoint.

    After successful saves, and after a failed save followed by a successful one, the
    directory holds the checkpoint and nothing else.
    """
    with _location(target) as where:
        _require_local(where)
        _saves_leave_no_temporary_files(target, where)


def _saves_leave_no_temporary_files(target: _Target, where: _Location) -> None:
    with _opened(target) as io:
        directory = where.path("only")
        path = os.path.join(directory, "model.ckpt")
        repro = _io_snippet(
            target,
            "for i in range(3):\n    io.save_checkpoint({'w': torch.full((4,), i)}, path)\n"
            "print(os.listdir(os.path.dirname(path)))  # expected ['model.ckpt']",
        )
        for seed in range(3):
            _save(io, _sample(target, seed), path)
        stray = sorted(set(os.listdir(directory)) - {"model.ckpt"})
        if stray:
            raise failure(
                target,
                "CKPT-3",
                expected="leave no temporary file after a successful save",
                actual=f"stray entries {stray}",
                hint="Rename the temporary file over the target (os.replace), or remove it.",
                snippet=repro,
            )
        with contextlib.suppress(Exception):
            _save(io, _failing_checkpoint(target), path)
        _save(io, _sample(target, 9), path)
        stray = sorted(set(os.listdir(directory)) - {"model.ckpt"})
        if stray:
            raise failure(
                target,
                "CKPT-3",
                expected="clean up the temporary file of a failed save (at the latest on the "
                "next save)",
                actual=f"stray entries {stray} after a failed and a successful save",
                hint="Remove the temporary file when writing raises.",
                snippet=repro,
            )


@check("CKPT-3", "checkpoint_io", requires=("local_paths",))
def check_checkpoint_io_concurrent_reader_sees_old_or_new_checkpoint(target: _Target) -> None:
    """A concurrent reader sees the old or the new checkpoint, never a torn one.

    A reader loading (through another instance) while saves replace the file always gets a
    complete old or new checkpoint.
    """
    with _location(target) as where:
        _require_local(where)
        _concurrent_reader_sees_old_or_new(target, where)


def _concurrent_reader_sees_old_or_new(target: _Target, where: _Location) -> None:
    rounds = int_option(target, "atomicity_rounds", 12)
    versions = [_big(1.0), _big(2.0)]
    problems: list[str] = []
    stop = threading.Event()
    loads = 0
    with _opened(target) as writer, _opened(target) as reader:
        path = where.path("concurrent.ckpt")
        _save(writer, versions[0], path)

        def read() -> None:
            nonlocal loads
            while not stop.is_set() and len(problems) < 3:
                try:
                    loaded = reader.load_checkpoint(path)
                except Exception as exc:
                    problems.append(f"load raised {describe_exception(exc)}")
                    continue
                loads += 1
                if all(checkpoint_differences(v, loaded) for v in versions):
                    problems.append(f"loaded a mixture: {describe_value(loaded)}")

        thread = threading.Thread(target=read, name="trainspec-conformance-reader", daemon=True)
        thread.start()
        try:
            for index in range(rounds):
                _save(writer, versions[(index + 1) % 2], path)
        finally:
            stop.set()
            thread.join(timeout=60)
        if problems:
            raise failure(
                target,
                "CKPT-3",
                expected="let a concurrent reader see only complete checkpoints",
                actual=f"{len(problems)} bad load(s) among {loads + len(problems)}: "
                + "; ".join(problems[:2]),
                hint="Write to a temporary file and os.replace() it over the target.",
                snippet=_io_snippet(
                    target,
                    """
                    import threading
                    io.save_checkpoint({"w": torch.ones(2**20)}, path)
                    reader = type(io)()
                    def read():
                        for _ in range(200):
                            reader.load_checkpoint(path)  # raises on a torn file
                    t = threading.Thread(target=read); t.start()
                    for i in range(20):
                        io.save_checkpoint({"w": torch.full((2**20,), float(i))}, path)
                    t.join()
                    """,
                ),
            )


# CKPT-3 decided as the spec says: a writer process killed with SIGKILL at random points of a
# large save (trainspec.conformance._checkpoint_kill), on $TMPDIR's file system and on another.

_KILL_NUMEL: Final = 1 << 19
"""Elements per tensor of the two-tensor checkpoints the killed writer saves (4 MiB float32)."""
_KILL_TRIALS: Final = 2
"""Kills per kind (at a random delay, when the path changes) and per location."""


def _which(loaded: object, versions: Sequence[Checkpoint]) -> int | None:
    """The index of the version ``loaded`` equals (``checkpoint_differences``: types, strides,
    sharing, bit-exact values), or None. The full comparison copies every tensor's bytes, so
    it runs only for a version :func:`_may_equal` does not rule out (at most one, as the
    versions differ in every value)."""
    for index, version in enumerate(versions):
        if _may_equal(version, loaded) and not checkpoint_differences(version, loaded):
            return index
    return None


def _may_equal(version: Checkpoint, loaded: object) -> bool:
    """False only when ``checkpoint_differences(version, loaded)`` cannot be empty: another
    type than ``dict``, other keys, or a tensor of another dtype, shape or device, or with
    other values (``torch.equal``: bit-equal tensors without NaN, as the versions have
    none, are ``torch.equal``)."""
    if type(loaded) is not dict or set(loaded) != set(version):
        return False
    for key, expected in version.items():
        actual = loaded[key]
        if not isinstance(actual, torch.Tensor) or not isinstance(expected, torch.Tensor):
            continue  # left to the full comparison
        if (actual.dtype, actual.shape, actual.device) != (
            expected.dtype,
            expected.shape,
            expected.device,
        ):
            return False
        if not (actual.is_meta or expected.is_meta) and not torch.equal(actual, expected):
            return False
    return True


_KILL_HINT = (
    "Write to a temporary file in the target's own directory, flush and os.fsync() it, then "
    "os.replace() it over the target. Never write onto the target, never remove it first, and "
    "never stage in $TMPDIR: os.replace() cannot cross file systems and shutil.move() then "
    "copies onto the target in place."
)


def _kill_snippet(target: _Target) -> str:
    return _io_snippet(
        target,
        """
        import signal, time
        a = {"first": torch.zeros(2**20), "second": torch.zeros(2**20)}
        b = {"first": torch.ones(2**20), "second": torch.ones(2**20)}
        io.save_checkpoint(a, path)
        pid = os.fork()
        if pid == 0:
            while True:
                io.save_checkpoint(b, path)
                io.save_checkpoint(a, path)
        time.sleep(0.01)
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        print(io.load_checkpoint(path))  # must load a or b whole
        """,
    )


def _kill_trials(
    target: _Target,
    server: KillServer,
    where: _Location,
    versions: Sequence[Checkpoint],
    label: str,
    rng: random.Random,
) -> None:
    """Kill writers over one path in ``where``; after each kill a fresh instance must load
    version 0 or 1 whole, and the next save must leave what one uninterrupted save leaves."""
    repro = _kill_snippet(target)
    control, directory = where.path("control"), where.path("killed")
    path = os.path.join(directory, "model.ckpt")

    def fail(expected: str, actual: str, exc: BaseException | None = None) -> NoReturn:
        raise failure(
            target,
            "CKPT-3",
            expected=f"{expected} ({label})",
            actual=actual,
            hint=_KILL_HINT,
            snippet=repro,
        ) from exc

    with _opened(target) as io:
        try:
            _save(io, versions[0], os.path.join(control, "model.ckpt"))
            started = time.perf_counter()
            _save(io, versions[0], path)
            save_s = time.perf_counter() - started
        except Exception as exc:
            fail("save a checkpoint", f"save_checkpoint raised {describe_exception(exc)}", exc)
        expected_entries = sorted(os.listdir(control))
        current = 0
        plan: list[float | None] = []
        for _ in range(_KILL_TRIALS):
            plan += [None, rng.uniform(0.0, 2.5 * save_s)]
        for delay in plan:
            when = "the moment the path changed" if delay is None else f"{delay:.3f}s into saving"
            outcome = server.trial(
                path,
                first=1 - current,
                delay_s=delay,
                timeout_s=max(10.0, 50 * save_s),
                timer_s=rng.uniform(5e-5, 5e-4) if delay is None else None,
            )
            if not outcome.started:
                raise CheckSkipped(
                    "the factory did not build an instance in a fresh process "
                    f"({outcome.error or 'no answer'}); CKPT-3's kill check needs one"
                )
            if not outcome.killed:
                fail(
                    "keep saving in a process until it is killed",
                    f"a save in the writer process failed: {outcome.error}",
                )
            try:
                with _opened(target) as reader:
                    loaded = reader.load_checkpoint(path)
            except Exception as exc:
                fail(
                    "leave the old or the new checkpoint when the saving process is killed",
                    f"after a SIGKILL {when}, a fresh instance's load raised "
                    f"{describe_exception(exc)}",
                    exc,
                )
            found = _which(loaded, versions)
            if found is None:
                differences = checkpoint_differences(versions[current], loaded)
                fail(
                    "leave the old or the new checkpoint when the saving process is killed",
                    f"after a SIGKILL {when}, the load was neither: " + "; ".join(differences[:3]),
                )
            current = found
        try:
            _save(io, versions[1 - current], path)
        except Exception as exc:
            fail(
                "save over what a killed writer left",
                f"save_checkpoint raised {describe_exception(exc)}",
                exc,
            )
        left = sorted(os.listdir(directory))
        if left != expected_entries:
            fail(
                "leave only what one uninterrupted save leaves after a later successful save, "
                "also when earlier writers were killed",
                f"entries {left}, where one save leaves {expected_entries}",
            )


@check("CKPT-3", "checkpoint_io", requires=("local_paths",))
def check_checkpoint_io_killed_save_leaves_old_or_new_checkpoint(target: _Target) -> None:
    """A save killed with SIGKILL leaves the old or the new checkpoint, never a torn one.

    A writer process (a fresh Python that imports the target's factory) saves two
    recognisable 4 MiB checkpoints in turn and is killed with SIGKILL the moment the path
    changes and at random delays, in a directory on $TMPDIR's file system and in one on
    another file system; after each kill a fresh instance loads the old or the new checkpoint,
    and the next save leaves what one save leaves. Skipped (counted) when the factory is not
    importable by its module and name (a lambda, a local function, a partial).
    """
    located = _forkable_factory(target, "kill")
    dtypes = _dtypes(target)
    dtype = torch.float32 if torch.float32 in dtypes else dtypes[0]
    versions = kill_checkpoints(_KILL_NUMEL, dtype)
    rng = random.Random(3)
    with _location(target) as where, _other_file_system(target) as other:
        _require_local(where)
        locations = [(where, "a directory on $TMPDIR's file system")]
        if other is not None:
            locations.append(
                (other, f"a directory on another file system than $TMPDIR: {other.root}")
            )
        try:
            with KillServer(*located, numel=_KILL_NUMEL, dtype=dtype) as server:
                for location, label in locations:
                    _kill_trials(target, server, location, versions, label, rng)
        except KillServerError as exc:
            raise CheckSkipped(f"the kill check's writer process failed: {exc}") from exc


@check("CKPT-3", "checkpoint_io", requires=("local_paths",))
def check_checkpoint_io_saves_are_atomic_on_another_file_system_than_tmpdir(
    target: _Target,
) -> None:
    """Saves stay atomic when the checkpoint directory is on another file system than $TMPDIR.

    The failed-save, no-temporary-file and concurrent-reader rules of CKPT-3 hold in a
    directory whose file system (st_dev) differs from $TMPDIR's, so staging in $TMPDIR and
    renaming or moving across file systems is caught. Skipped (counted) when this machine has
    no such directory.
    """
    with _other_file_system(target) as other:
        if other is None:
            raise CheckSkipped(_no_other_file_system())
        label = f"with the checkpoint directory on another file system than $TMPDIR ({other.root})"
        checkpoint = _sample(target, 21)
        with _opened(target) as io:
            path = other.path("plain", "model.ckpt")
            try:
                _save(io, checkpoint, path)
                loaded = io.load_checkpoint(path)
            except Exception as exc:
                raise failure(
                    target,
                    "CKPT-3",
                    expected=f"save and load a checkpoint {label}",
                    actual=describe_exception(exc),
                    hint=_KILL_HINT,
                    snippet=_io_snippet(
                        target,
                        "path = os.path.join(tempfile.mkdtemp(dir='/dev/shm'), 'model.ckpt')\n"
                        "io.save_checkpoint({'w': torch.ones(2)}, path)",
                    ),
                ) from exc
            _equal_or_fail(
                target, "CKPT-3", checkpoint, loaded, what=f"load what was saved {label}", repro=""
            )
        for body in (
            _failed_save_leaves_previous_intact,
            _saves_leave_no_temporary_files,
            _concurrent_reader_sees_old_or_new,
        ):
            try:
                body(target, other)
            except CheckSkipped:
                continue  # that rule has nothing to decide for this target (as on $TMPDIR)
            except CheckFailure as caught:
                raise failure(
                    target,
                    caught.clause,
                    expected=f"{caught.expected} {label}",
                    actual=caught.actual,
                    hint=caught.hint,
                    snippet=caught.snippet,
                ) from caught
