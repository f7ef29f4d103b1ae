"""ACKPT-1 ... ACKPT-5 (capability ``async``, inferred from
:class:`trainspec.AsyncCheckpointIO`): saves snapshot at call time, background errors surface
on the next call, operations on a pending path wait for its save, teardown and ``wait()`` wait
for every pending save."""

from __future__ import annotations

import contextlib
import copy
import os
import threading
from typing import TYPE_CHECKING, Final

import torch

from trainspec.checkpoint_io import AsyncCheckpointIO, CheckpointIO
from trainspec.conformance._helpers import describe_exception, expect_raises, failure
from trainspec.conformance.checks.checkpoint_io._fixtures import (
    _big,
    _caps,
    _equal_or_fail,
    _io_snippet,
    _location,
    _opened,
    _require_local,
    _sample,
    _Target,
)
from trainspec.conformance.core import CheckSkipped, check
from trainspec.errors import CheckpointNotFoundError, CheckpointWriteError

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from trainspec.types import Checkpoint


def _saved_checkpoints_load_back(
    target: _Target,
    clause: str,
    io: CheckpointIO,
    saved: Mapping[str, Checkpoint],
    *,
    fresh_reader: bool,
    what: str,
    repro: str,
) -> None:
    """Every ``saved`` checkpoint loads back equal, read by a fresh instance on local storage
    (so nothing cached in ``io`` can answer) or by ``io`` itself elsewhere."""
    reader = target.make() if fresh_reader else io
    try:
        for path, checkpoint in saved.items():
            _equal_or_fail(
                target, clause, checkpoint, reader.load_checkpoint(path), what=what, repro=repro
            )
    finally:
        if reader is not io:
            with contextlib.suppress(Exception):
                reader.teardown()


# --------------------------------------------------------------------------- ACKPT-1 ... 5


def _async(target: _Target, io: CheckpointIO) -> AsyncCheckpointIO:
    if not isinstance(io, AsyncCheckpointIO):
        raise CheckSkipped(
            "declares 'async' but is not a trainspec.AsyncCheckpointIO (see the structure layer)"
        )
    return io


def _async_snippet(target: _Target, body: str) -> str:
    return _io_snippet(target, body)


@check("ACKPT-1", "checkpoint_io", requires=("async",))
def check_async_checkpoint_io_snapshots_at_save_time(target: _Target) -> None:
    """An asynchronous save writes the checkpoint as it was at the call.

    Mutating a tensor (or a list) right after save_checkpoint returns does not change what
    is written.
    """
    with _location(target) as where, _opened(target) as opened:
        io = _async(target, opened)
        path = where.path("snapshot.ckpt")
        checkpoint = _big(1.0, megabytes=4)
        if "python_objects" in _caps(target):
            checkpoint["steps"] = [1, 2]
        expected = copy.deepcopy(checkpoint)
        io.save_checkpoint(checkpoint, path)
        with torch.no_grad():
            checkpoint["weight"].fill_(-1.0)
        if "python_objects" in _caps(target):
            checkpoint["steps"].append(3)
        io.wait()
        _equal_or_fail(
            target,
            "ACKPT-1",
            expected,
            io.load_checkpoint(path),
            what="write the checkpoint as it was when save_checkpoint was called",
            repro=_async_snippet(
                target,
                """
                w = torch.ones(2**22)
                io.save_checkpoint({"w": w}, path)
                w.fill_(-1.0)
                io.wait()
                print(io.load_checkpoint(path)["w"][0])  # expected 1.0
                """,
            ),
            hint="Copy tensor storages (and containers) before returning from save_checkpoint.",
        )


_RELATIVE_NAME: Final = "relative.ckpt"
_CWD_GUARD_S: Final = 120.0  # a hang guard, not a timing requirement


@check("ACKPT-1", "checkpoint_io", requires=("async", "local_paths"))
def check_async_checkpoint_io_resolves_a_relative_path_at_call_time(target: _Target) -> None:
    """An asynchronous save of a relative path writes where the path pointed at the call.

    Changing the working directory after save_checkpoint returns, before the background write,
    does not change where the checkpoint is written.
    """
    with _location(target) as where, _opened(target) as opened:
        _require_local(where)
        io = _async(target, opened)
        root = os.path.abspath(where.root)  # the check's own paths never depend on the cwd
        at_call, later = os.path.join(root, "at-call"), os.path.join(root, "later")
        os.makedirs(at_call)
        os.makedirs(later)
        try:
            previous = os.getcwd()
        except OSError as exc:
            raise CheckSkipped(
                "the working directory no longer exists; it could not be restored"
            ) from exc
        checkpoint = _big(5.0, megabytes=1)
        # The working directory is process-wide: it is changed only while the calls below
        # run, on a helper thread, and restored by this thread after them, or after
        # _CWD_GUARD_S if they hang (a hung plugin must not leave the kit in its directory).
        # Every other path of the kit is absolute.
        lock = threading.Lock()
        abandoned = False
        errors: list[BaseException] = []

        def chdir_unless_abandoned(directory: str) -> bool:
            with lock:
                if not abandoned:
                    os.chdir(directory)
                return not abandoned

        def calls() -> None:
            try:
                if not chdir_unless_abandoned(at_call):
                    return
                try:
                    # A large save first keeps a one-worker IO busy, so the relative save is
                    # written after the directory changes.
                    io.save_checkpoint(_big(1.0, megabytes=16), os.path.join(root, "hold.ckpt"))
                    io.save_checkpoint(checkpoint, _RELATIVE_NAME)
                finally:
                    chdir_unless_abandoned(later)
                io.wait()
            except BaseException as exc:  # handed to the check's thread
                errors.append(exc)

        helper = threading.Thread(target=calls, name="trainspec-conformance-chdir", daemon=True)
        try:
            helper.start()
            helper.join(_CWD_GUARD_S)
        finally:
            with lock:
                abandoned = True
                os.chdir(previous)
        if helper.is_alive():
            raise failure(
                target,
                "ACKPT-1",
                expected="return from save_checkpoint and wait()",
                actual=f"they had not returned after {_CWD_GUARD_S:g} s (the kit's working "
                "directory was restored; the calls are left running)",
            )
        if errors:
            raise errors[0]
        repro = _async_snippet(
            target,
            f"""
            os.makedirs("a"); os.makedirs("b")
            os.chdir("a")
            io.save_checkpoint({{"w": torch.ones(2**22)}}, "{_RELATIVE_NAME}")
            os.chdir("../b")
            io.wait()
            print(os.path.exists("../a/{_RELATIVE_NAME}"))  # expected True
            """,
        )
        expected_path = os.path.join(at_call, _RELATIVE_NAME)
        if not os.path.exists(expected_path):
            elsewhere = os.path.exists(os.path.join(later, _RELATIVE_NAME))
            raise failure(
                target,
                "ACKPT-1",
                expected="write a relative path where it pointed when save_checkpoint was called",
                actual="the file was written relative to the working directory at write time"
                if elsewhere
                else "no file at the path as it was resolved at the call",
                hint="Resolve a relative path (os.path.join(os.getcwd(), path)) in "
                "save_checkpoint, before queuing the write.",
                snippet=repro,
            )
        _equal_or_fail(
            target,
            "ACKPT-1",
            checkpoint,
            io.load_checkpoint(expected_path),
            what="write a relative path where it pointed when save_checkpoint was called",
            repro=repro,
        )


# Calls that must wait for the failed save (ACKPT-3/4/5) and so must see its error. A save of
# another path right after the failing one may run before the failure happens, so whether it
# reports the error is timing, not contract; it is not checked.
_ACKPT2_CALLS: Final[tuple[str, ...]] = (
    "wait",
    "load_checkpoint",
    "remove_checkpoint",
    "teardown",
)


@check("ACKPT-2", "checkpoint_io", requires=("async", "local_paths"))
def check_async_checkpoint_io_surfaces_background_errors(target: _Target) -> None:
    """A failed background save raises from the next call that waits for it.

    A background save that fails raises CheckpointWriteError from the next call that waits
    for it: wait, teardown, or a load or remove of its path.
    """
    for call in _ACKPT2_CALLS:
        _surface_background_error(target, call)


def _surface_background_error(target: _Target, call: str) -> None:
    """One ACKPT-2 case: a failing background save, then ``call``."""
    with _location(target) as where, _opened(target) as opened:
        _require_local(where)
        io = _async(target, opened)
        blocker = where.path("blocker")
        with open(blocker, "wb") as file:
            file.write(b"a regular file, not a directory")
        bad = os.path.join(blocker, "model.ckpt")
        argument = "" if call in ("wait", "teardown") else "os.path.join(path, 'x.ckpt')"
        repro = _async_snippet(
            target,
            f"""
            open(path, "w").close()
            io.save_checkpoint({{"w": torch.ones(2)}}, os.path.join(path, "x.ckpt"))
            io.{call}({argument})  # expected CheckpointWriteError
            """,
        )
        try:
            io.save_checkpoint(_sample(target, 22), bad)
        except CheckpointWriteError:
            return  # reported at once: even better
        actions: dict[str, Callable[[], object]] = {
            "wait": io.wait,
            "load_checkpoint": lambda: io.load_checkpoint(bad),
            "remove_checkpoint": lambda: io.remove_checkpoint(bad),
            "teardown": io.teardown,
        }
        expect_raises(
            target,
            "ACKPT-2",
            CheckpointWriteError,
            actions[call],
            expected=f"raise the failed background save's CheckpointWriteError from the "
            f"next {call}()",
            hint="Store the worker's exception and raise it from the next call (after "
            "waiting for the failed save).",
            snippet=repro,
        )


@check("ACKPT-3", "checkpoint_io", requires=("async",))
def check_async_checkpoint_io_load_and_remove_wait_for_pending_save(target: _Target) -> None:
    """load_checkpoint and remove_checkpoint of a path with a pending save wait for it."""
    with _location(target) as where, _opened(target) as opened:
        io = _async(target, opened)
        path = where.path("pending.ckpt")
        io.save_checkpoint(_big(1.0, megabytes=1), path)
        io.wait()
        newer = _big(2.0, megabytes=4)
        io.save_checkpoint(newer, path)
        _equal_or_fail(
            target,
            "ACKPT-3",
            newer,
            io.load_checkpoint(path),
            what="return the pending save's checkpoint from a load of the same path",
            repro=_async_snippet(
                target,
                """
                io.save_checkpoint({"w": torch.zeros(2**20)}, path); io.wait()
                io.save_checkpoint({"w": torch.ones(2**22)}, path)
                print(io.load_checkpoint(path)["w"][0])  # expected 1.0
                """,
            ),
            hint="Track pending saves per path; load and remove wait for that path's saves.",
        )
        removed = where.path("removed.ckpt")
        io.save_checkpoint(_big(3.0, megabytes=4), removed)
        io.remove_checkpoint(removed)
        io.wait()
        expect_raises(
            target,
            "ACKPT-3",
            CheckpointNotFoundError,
            lambda: io.load_checkpoint(removed),
            expected="wait for a pending save before removing its path (so the removal sticks)",
            hint="remove_checkpoint must wait for pending saves of the path first.",
            snippet=_async_snippet(
                target,
                """
                io.save_checkpoint({"w": torch.ones(2**22)}, path)
                io.remove_checkpoint(path)
                io.wait()
                io.load_checkpoint(path)  # expected CheckpointNotFoundError
                """,
            ),
        )


@check("ACKPT-4", "checkpoint_io", requires=("async",))
def check_async_checkpoint_io_teardown_waits_for_pending_saves(target: _Target) -> None:
    """After teardown returns, every checkpoint saved before it is complete on storage."""
    with _location(target) as where, _opened(target) as opened:
        io = _async(target, opened)
        saved = {where.path(f"teardown-{i}.ckpt"): _big(float(i), megabytes=2) for i in range(3)}
        for path, checkpoint in saved.items():
            io.save_checkpoint(checkpoint, path)
        io.teardown()
        repro = _async_snippet(
            target,
            """
            io.save_checkpoint({"w": torch.ones(2**22)}, path)
            io.teardown()
            print(os.path.exists(path))  # expected True, and loadable by a fresh instance
            """,
        )
        missing = [p for p in saved if where.local and not os.path.exists(p)]
        if missing:
            raise failure(
                target,
                "ACKPT-4",
                expected="finish every pending save before teardown returns",
                actual=f"{len(missing)} of {len(saved)} files missing right after teardown",
                hint="Join the worker after the queue is drained in teardown.",
                snippet=repro,
            )
        _saved_checkpoints_load_back(
            target,
            "ACKPT-4",
            io,
            saved,
            fresh_reader=where.local,
            what="finish every pending save before teardown returns",
            repro=repro,
        )


@check("ACKPT-5", "checkpoint_io", requires=("async",))
def check_async_checkpoint_io_wait_completes_every_pending_save(target: _Target) -> None:
    """wait() returns only when every pending save is complete.

    wait() returns only when every pending save is complete; with nothing pending it returns
    at once.
    """
    with _location(target) as where, _opened(target) as opened:
        io = _async(target, opened)
        io.wait()
        saved = {where.path(f"wait-{i}.ckpt"): _big(float(i), megabytes=2) for i in range(3)}
        for path, checkpoint in saved.items():
            io.save_checkpoint(checkpoint, path)
        io.wait()
        repro = _async_snippet(
            target,
            """
            io.save_checkpoint({"w": torch.ones(2**22)}, path)
            io.wait()
            print(os.path.exists(path))  # expected True
            """,
        )
        missing = [p for p in saved if where.local and not os.path.exists(p)]
        if missing:
            raise failure(
                target,
                "ACKPT-5",
                expected="complete every pending save before wait() returns",
                actual=f"{len(missing)} of {len(saved)} files missing right after wait()",
                snippet=repro,
            )
        _saved_checkpoints_load_back(
            target,
            "ACKPT-5",
            io,
            saved,
            fresh_reader=where.local,
            what="complete every pending save before wait() returns",
            repro=repro,
        )


@check("ACKPT-5", "checkpoint_io", requires=("async", "local_paths"))
def check_async_checkpoint_io_wait_raises_a_background_error_once(target: _Target) -> None:
    """wait() raises a background save's error once, then returns normally.

    wait() raises a failed background save's CheckpointWriteError once; the next wait()
    returns normally.
    """
    with _location(target) as where, _opened(target) as opened:
        _require_local(where)
        io = _async(target, opened)
        blocker = where.path("blocker")
        with open(blocker, "wb") as file:
            file.write(b"a regular file, not a directory")
        repro = _async_snippet(
            target,
            """
            open(path, "w").close()
            io.save_checkpoint({"w": torch.ones(2)}, os.path.join(path, "x.ckpt"))
            io.wait()  # expected CheckpointWriteError
            io.wait()  # expected to return
            """,
        )
        try:
            io.save_checkpoint(_sample(target, 24), os.path.join(blocker, "model.ckpt"))
        except CheckpointWriteError as exc:
            raise CheckSkipped(
                "the failing save raised at once; wait() has nothing to report"
            ) from exc
        expect_raises(
            target,
            "ACKPT-5",
            CheckpointWriteError,
            io.wait,
            expected="raise the failed background save's CheckpointWriteError from wait()",
            snippet=repro,
        )
        try:
            io.wait()
        except Exception as exc:
            raise failure(
                target,
                "ACKPT-5",
                expected="raise a background error once, then let wait() return",
                actual=f"the second wait() raised {describe_exception(exc)}",
                hint="Clear the stored error when it is raised.",
                snippet=repro,
            ) from exc
