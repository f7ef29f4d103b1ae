"""CKPT-14: an interruption during a save or a load propagates as itself.

``KeyboardInterrupt`` is raised at the call's *interrupt points* -- each entry into a Python
function and each return from a call into C in the calling thread, where CPython runs signal
handlers -- one point per trial, in a child forked from a fresh Python process that imports
the target's factory (``trainspec.conformance._checkpoint_kill``, the CKPT-3 kill server).
Each trial must end with the call raising the interrupt itself, the process alive after a
garbage collection and ``teardown`` returning; then a fresh instance (in this process) must
find the old or the new checkpoint at the path and save over it leaving what one save leaves.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Final, NoReturn

import torch

from trainspec.conformance._checkpoint_kill import (
    InterruptOutcome,
    KillServer,
    KillServerError,
    kill_checkpoints,
)
from trainspec.conformance._helpers import (
    checkpoint_differences,
    describe_exception,
    failure,
    int_option,
)
from trainspec.conformance.checks.checkpoint_io._fixtures import (
    _dtypes,
    _forkable_factory,
    _io_snippet,
    _location,
    _opened,
    _require_local,
    _save,
    _Target,
)
from trainspec.conformance.core import CheckSkipped, check

if TYPE_CHECKING:
    from collections.abc import Sequence

    from trainspec.types import Checkpoint

# --------------------------------------------------------------------------- CKPT-14

_NUMEL: Final = 1 << 12
"""Elements per tensor of the two checkpoints (16 KiB float32): the points, not the bytes,
are what matters."""
_DEFAULT_POINTS: Final = 32
"""Interrupt points tried per operation unless the ``interrupt_points`` option says otherwise
(0: every point)."""
_TIMEOUT_S: Final = 20.0
"""How long one trial (build, save A, the interrupted call, a collection, teardown) may take."""

_HINTS: Final = {
    "raised": "Let an exception that is not an Exception propagate: catch Exception, not "
    "BaseException, and clean up in a finally block. torch.save wraps an interrupt raised in "
    "the file object's write in a RuntimeError: find the KeyboardInterrupt in __cause__ / "
    "__context__ and raise it instead of translating the RuntimeError.",
    "returned": "Do not catch KeyboardInterrupt (or BaseException) and carry on. CPython also "
    "drops an exception raised in Python code that a finalizer runs (__del__, or the flush "
    "and close of an io.IOBase subclass left to the garbage collector): close such objects "
    "explicitly, where an interrupt propagates.",
    "died": "An interrupted torch.save can leave its zip writer unfinished; the writer's "
    "destructor later writes the end of the archive into the file object it was given, and "
    "an exception there (the file is closed by then) aborts the process. After a failed "
    "save, make that file object accept and drop writes instead of raising.",
    "teardown": "A `with` on a threading.Condition can leave its lock held when the "
    "interrupt lands inside Condition.__enter__ (Python code), and Condition.wait can leave "
    "it released; enter the underlying C lock directly and take it back when wait() was "
    "interrupted.",
    "state": "Write to a temporary file in the target's directory and os.replace() it over "
    "the target; on any failure, interruptions included, delete the temporary file.",
}


def _evenly(points: Sequence[int], limit: int) -> list[int]:
    """``limit`` of ``points`` evenly spaced, the first and the last included (all of them
    when there are no more than ``limit``)."""
    if len(points) <= limit:
        return list(points)
    if limit <= 1:
        return list(points[-limit:]) if limit else []
    last = len(points) - 1
    return sorted({points[(i * last) // (limit - 1)] for i in range(limit)})


def _points(candidates: Sequence[int], own: Sequence[int], limit: int) -> list[int]:
    """The points to try among ``candidates``: all of them when ``limit`` is 0 or not
    smaller; otherwise up to half of ``limit`` among those in the implementation's own code
    (``own``), where a swallowed interrupt is decided, and the rest evenly over the others."""
    if limit == 0 or len(candidates) <= limit:
        return list(candidates)
    allowed = set(candidates)
    mine = _evenly([p for p in own if p in allowed], max(1, limit // 2))
    taken = set(own)
    others = [p for p in candidates if p not in taken]
    return sorted(set(mine) | set(_evenly(others, limit - len(mine))))


def _package(module: str) -> str:
    return module.split(".", 1)[0]


def _snippet(target: _Target, operation: str, outcome: InterruptOutcome) -> str:
    """A runnable reproduction: the interrupt at the first time the call reaches the point
    where the kit raised it (event, function, file, line and, after a C call, its name)."""
    point = outcome.point
    if operation == "save":
        call, after = "io.save_checkpoint(b, path)", "print(io.load_checkpoint(path))  # a or b"
    else:
        call, after = "io.load_checkpoint(path)", "print(io.load_checkpoint(path))  # still a"
    called = point.get("called")
    after_c = (
        f'\n                and getattr(arg, "__qualname__", None) == {called!r}' if called else ""
    )
    return _io_snippet(
        target,
        f"""
        import gc, sys
        a, b = {{"w": torch.zeros(4096)}}, {{"w": torch.ones(4096)}}
        io.save_checkpoint(a, path)
        def interrupt(frame, event, arg):  # Ctrl-C where the kit raised it
            if (
                event == {point.get("event", "call")!r}
                and frame.f_code.co_name == {point.get("function", "")!r}
                and frame.f_code.co_filename.endswith({point.get("file", "")!r})
                and frame.f_lineno == {point.get("line", 0)!r}{after_c}
            ):
                sys.setprofile(None)
                raise KeyboardInterrupt
        sys.setprofile(interrupt)
        try:
            {call}
        except KeyboardInterrupt:
            print("KeyboardInterrupt, as CKPT-14 requires")
        else:
            print("returned normally: the interrupt was lost")
        finally:
            sys.setprofile(None)
        gc.collect()  # an unfinished torch writer's destructor runs here
        {after}
        """,
    )


def _interrupt_trials(target: _Target, operation: str) -> None:
    located = _forkable_factory(target, "interrupt")
    limit = int_option(target, "interrupt_points", _DEFAULT_POINTS)
    if limit < 0:
        raise TypeError(f"conformance option 'interrupt_points' must be >= 0, got {limit}")
    dtypes = _dtypes(target)
    dtype = torch.float32 if torch.float32 in dtypes else dtypes[0]
    versions = kill_checkpoints(_NUMEL, dtype)
    with _location(target) as where:
        _require_local(where)
        control = os.path.join(where.path("control"), "model.ckpt")
        path = os.path.join(where.path("interrupted"), "model.ckpt")
        with _opened(target) as io:
            package = _package(type(io).__module__)
            _save(io, versions[0], control)
            _save(io, versions[0], path)
        one_save = sorted(os.listdir(os.path.dirname(control)))
        try:
            with KillServer(*located, numel=_NUMEL, dtype=dtype) as server:
                counted = server.interrupt(
                    path, operation=operation, at=None, timeout_s=_TIMEOUT_S, package=package
                )
                if not counted.started or counted.ended != "returned":
                    raise CheckSkipped(
                        f"an undisturbed {operation} in a fresh process did not succeed "
                        f"({counted.error or counted.status or counted.ended}); other clauses "
                        "decide that"
                    )
                decided = 0
                skipped = set(counted.importing)  # a half-imported module is not the IO's
                candidates = [p for p in range(1, counted.points + 1) if p not in skipped]
                for at in _points(candidates, counted.own, limit):
                    outcome = server.interrupt(
                        path, operation=operation, at=at, timeout_s=_TIMEOUT_S
                    )
                    decided += _decide(target, operation, outcome, package)
                    _after(target, operation, outcome, path, versions, one_save)
        except KillServerError as exc:
            raise CheckSkipped(f"the interrupt check's child process failed: {exc}") from exc
    if decided == 0:
        raise CheckSkipped(
            f"no interrupt point of the {operation} was decided (each interrupt was lost "
            "outside the implementation's package)"
        )


def _decide(target: _Target, operation: str, outcome: InterruptOutcome, package: str) -> int:
    """1 when the trial decided the point (it passed), 0 when undecided; raises on failure."""
    at = f"at {outcome.where}" if outcome.where else "(the call ended before the point)"

    def fail(expected: str, actual: str, hint: str) -> NoReturn:
        raise failure(
            target,
            "CKPT-14",
            expected=expected,
            actual=actual,
            hint=_HINTS[hint],
            snippet=_snippet(target, operation, outcome),
        )

    if not outcome.started:
        fail(
            f"save a checkpoint in a fresh instance after an earlier interrupted {operation}",
            f"the save failed: {outcome.error or outcome.status}",
            "state",
        )
    own = _package(outcome.module) == package
    if outcome.ended == "raised" and (outcome.carried or own):
        fail(
            f"raise the KeyboardInterrupt itself when one is raised during the {operation}",
            f"raised {outcome.error} (the interrupt was raised {at})",
            "raised",
        )
    if outcome.ended == "":
        fail(
            f"end the interrupted {operation} with the KeyboardInterrupt",
            f"the process {outcome.status or 'ended'} before the call ended (interrupt {at})",
            "died",
        )
    if not outcome.survived:
        fail(
            f"keep the process alive after an interrupted {operation}",
            f"the process was {outcome.status or 'gone'} when garbage was collected after "
            f"the interrupt {at}",
            "died",
        )
    if not outcome.torn_down:
        fail(
            f"return from teardown() after an interrupted {operation}",
            f"teardown() had not returned after {_TIMEOUT_S:.0f} s (interrupt {at})",
            "teardown",
        )
    if outcome.ended == "raised":
        return 0  # lost in a library (a bare except), then another error: undecided
    if outcome.ended == "returned" and outcome.fired:
        if own:
            fail(
                f"let the KeyboardInterrupt raised in its own code propagate out of the "
                f"{operation}",
                f"the call returned normally: the interrupt raised {at} was caught and discarded",
                "returned",
            )
        return 0  # lost outside the implementation (a library's finalizer): undecided
    return 1 if outcome.ended == "interrupted" else 0


def _after(
    target: _Target,
    operation: str,
    outcome: InterruptOutcome,
    path: str,
    versions: Sequence[Checkpoint],
    one_save: list[str],
) -> None:
    """What a fresh instance finds at ``path`` after the trial, and what its next save leaves."""
    at = f"at {outcome.where}" if outcome.where else ""
    allowed = versions if operation == "save" else versions[:1]

    def fail(expected: str, actual: str, exc: BaseException | None = None) -> NoReturn:
        raise failure(
            target,
            "CKPT-14",
            expected=expected,
            actual=actual,
            hint=_HINTS["state"],
            snippet=_snippet(target, operation, outcome),
        ) from exc

    with _opened(target) as io:
        try:
            loaded = io.load_checkpoint(path)
        except Exception as exc:
            fail(
                f"leave a loadable checkpoint at the path after an interrupted {operation}",
                f"after the interrupt {at}, a fresh instance's load raised "
                f"{describe_exception(exc)}",
                exc,
            )
        if all(checkpoint_differences(version, loaded) for version in allowed):
            which = "the old or the new checkpoint" if operation == "save" else "the checkpoint"
            differences = checkpoint_differences(allowed[0], loaded)
            fail(
                f"leave {which} at the path after an interrupted {operation}",
                f"after the interrupt {at}, the load was neither: " + "; ".join(differences[:3]),
            )
        try:
            _save(io, versions[0], path)
        except Exception as exc:
            fail(
                f"save over the path after an interrupted {operation}",
                f"save_checkpoint raised {describe_exception(exc)} (interrupt {at})",
                exc,
            )
    left = sorted(os.listdir(os.path.dirname(path)))
    if left != one_save:
        fail(
            f"leave only what one uninterrupted save leaves after an interrupted {operation} "
            "and a successful save",
            f"entries {left}, where one save leaves {one_save} (interrupt {at})",
        )


@check("CKPT-14", "checkpoint_io", requires=("local_paths",))
def check_checkpoint_io_interrupted_save_raises_the_interrupt(target: _Target) -> None:
    """A KeyboardInterrupt raised during a save comes out as itself, leaving old or new.

    The interrupt is raised at each interrupt point of one save (or an evenly spaced sample,
    option ``interrupt_points``), in a child of a fresh process that imports the factory: the
    save raises it itself, the process survives a garbage collection, teardown returns, and a
    fresh instance then loads the old or the new checkpoint and saves leaving what one save
    leaves. Skipped (counted) when the factory is not importable by its module and name.
    """
    _interrupt_trials(target, "save")


@check("CKPT-14", "checkpoint_io", requires=("local_paths",))
def check_checkpoint_io_interrupted_load_raises_the_interrupt(target: _Target) -> None:
    """A KeyboardInterrupt raised during a load comes out as itself and changes nothing.

    As the save check, for ``load_checkpoint``: the load raises the interrupt itself, the
    process survives a garbage collection, teardown returns, and the path still holds the
    checkpoint, which a fresh instance loads and saves over leaving what one save leaves.
    """
    _interrupt_trials(target, "load")
