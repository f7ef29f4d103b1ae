"""The body of one rank process of a :class:`~trainspec.conformance.distributed.World`.

Runs in a process started with multiprocessing's ``spawn`` method. In this order it:

1. points file descriptor 2 at its per-rank stderr file (so that native crashes, c10d logs
   and faulthandler's dumps are captured), leaves its parent's process group (so the parent
   can kill it with everything it started, and a terminal's Ctrl-C reaches only the parent),
   enables faulthandler on fatal signals and registers a stack dump of every thread on
   ``SIGUSR1`` into its per-rank stack file;
2. sets its environment variables (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``,
   ``MASTER_ADDR``, ``MASTER_PORT``, ...) and starts a thread that ends the process when the
   parent dies;
3. imports torch and the check modules once, says ``ready``, and then runs tasks until told
   to stop. It sets up no process group itself: the checks set up the collective or strategy
   they test.

After every check it tears down the instances the check's factory made, destroys a default
process group the check left behind (noting it), and restores the environment variables.
Nothing here is public API.
"""

from __future__ import annotations

import dataclasses
import faulthandler
import importlib
import os
import signal
import sys
import threading
import time
import traceback
from typing import TYPE_CHECKING, BinaryIO, Final, cast

from trainspec.conformance.distributed._protocol import (
    PlanTask,
    RunTask,
    StopTask,
    WorkerConfig,
)

if TYPE_CHECKING:
    from collections.abc import Callable
    from multiprocessing.connection import Connection

    from trainspec.conformance.core import Check, Kind, Target

__all__ = ["DEFAULT_PRELOAD", "main"]

DEFAULT_PRELOAD: Final = (
    "torch",
    "trainspec.conformance.checks.collective",
    "trainspec.conformance.checks.strategy",
    "trainspec.conformance.distributed.checks",
)
"""Modules every rank imports at start; a missing check module is skipped."""

_PARENT_POLL_S: Final = 0.5
_EXIT_ORPHANED: Final = 75
_stack_file: BinaryIO | None = None  # kept open for faulthandler for the life of the process


# --------------------------------------------------------------------------- process setup


def _prepare_process(config: WorkerConfig) -> None:
    global _stack_file
    sys.stderr.flush()
    fd = os.open(config.stderr_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 2)
    os.close(fd)
    try:
        os.setpgid(0, 0)
    except (AttributeError, OSError):  # not POSIX, or not allowed: the parent kills by pid
        pass
    faulthandler.enable(file=sys.stderr, all_threads=True)
    _stack_file = open(config.stack_path, "ab", buffering=0)
    dump_signal = getattr(signal, "SIGUSR1", None)
    if dump_signal is not None:
        faulthandler.register(dump_signal, file=_stack_file, all_threads=True, chain=False)
    os.environ.update(config.env)


def _watch_parent(parent_pid: int) -> None:
    # A parent killed without running its clean-up (SIGKILL, os._exit) must not leave its
    # ranks behind: each rank notices that it was re-parented and exits.
    def watch() -> None:
        while True:
            time.sleep(_PARENT_POLL_S)
            if os.getppid() != parent_pid:
                os._exit(_EXIT_ORPHANED)

    threading.Thread(target=watch, name="trainspec-parent-watch", daemon=True).start()


def _preload(modules: tuple[str, ...]) -> None:
    for name in modules:
        try:
            importlib.import_module(name)
        except ModuleNotFoundError as error:
            if error.name != name:  # the module exists but something it imports does not
                raise


def main(config: WorkerConfig, conn: Connection) -> None:
    """Run as rank ``config.rank`` until a :class:`StopTask` or the pipe closes."""
    _prepare_process(config)
    _watch_parent(config.parent_pid)
    try:
        _preload(config.preload)
    except BaseException:
        conn.send(("start_failed", traceback.format_exc()))
        return
    conn.send(("ready", os.getpid()))
    baseline = dict(os.environ)
    while True:
        try:
            task = conn.recv()
        except (EOFError, OSError):
            return
        if isinstance(task, StopTask):
            # Skip the interpreter's shutdown: it takes seconds with torch loaded, and a
            # non-daemon thread a check left behind would keep the rank alive.
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(0)
        if isinstance(task, RunTask):
            conn.send(("result", task.task_id, _run(task, conn, config)))
        elif isinstance(task, PlanTask):
            conn.send(("result", task.task_id, _plan(task)))
        _restore_environment(baseline)


def _restore_environment(baseline: dict[str, str]) -> None:
    for key in [k for k in os.environ if k not in baseline]:
        del os.environ[key]
    for key, value in baseline.items():
        if os.environ.get(key) != value:
            os.environ[key] = value


# --------------------------------------------------------------------------- checks


def _checks_module(kind: Kind) -> str:
    return f"trainspec.conformance.checks.{kind}"


def _all_checks(kind: Kind) -> tuple[list[Check], list[str]]:
    """Every check of ``kind``: the kit's (when its module exists) and the distributed
    ones, in layer order; plus problems to report."""
    from trainspec.conformance.core import LAYERS, checks_for
    from trainspec.conformance.distributed.checks import DISTRIBUTED_CHECKS

    problems: list[str] = []
    try:
        found = list(checks_for(kind))
    except ModuleNotFoundError as error:
        if error.name != _checks_module(kind):
            raise
        found = []
        problems.append(
            f"no behaviour checks are installed for kind {kind!r} ({_checks_module(kind)} not "
            "found); only the distributed and end-to-end checks ran"
        )
    names = {c.name for c in found}
    found.extend(c for c in DISTRIBUTED_CHECKS if c.kind == kind and c.name not in names)
    return sorted(found, key=lambda c: LAYERS.index(c.layer)), problems


def _resolve(reference: str, kind: Kind) -> tuple[Callable[[Target[object]], None], str, str]:
    """The callable to run for a check name or ``"module:function"``, its clause and layer."""
    from trainspec.conformance.runner import load_object
    from trainspec.errors import ConfigurationError

    checks, _ = _all_checks(kind)
    if ":" in reference:
        func = load_object(reference)
        if not callable(func):
            raise ConfigurationError(
                f"check {reference!r} must name a function taking a Target; got {func!r}"
            )
        for known in checks:
            if known.func is func:
                return known.run, known.clause, known.layer
        return cast("Callable[[Target[object]], None]", func), "", "distributed"
    for known in checks:
        if known.name == reference:
            return known.run, known.clause, known.layer
    raise ConfigurationError(
        f"unknown check {reference!r} for kind {kind!r}; valid: "
        + ", ".join(sorted(c.name for c in checks))
        + ", or 'package.module:function' of a function taking a Target"
    )


def _leaves(error: BaseException) -> list[BaseException]:
    # Exception groups (hypothesis, task groups; 3.11+) are judged by their leaves.
    nested = getattr(error, "exceptions", None)
    if isinstance(nested, tuple) and type(error).__name__.endswith("ExceptionGroup"):
        return [leaf for sub in nested if isinstance(sub, BaseException) for leaf in _leaves(sub)]
    return [error]


def _text(error: BaseException) -> str:
    text = str(error)
    notes = getattr(error, "__notes__", None)
    if isinstance(notes, list) and notes:
        text += "\n" + "\n".join(str(note) for note in notes)
    return text


def _classify(error: BaseException) -> tuple[str, str]:
    from trainspec.conformance.core import CheckSkipped

    leaves = _leaves(error)
    if all(isinstance(e, CheckSkipped) for e in leaves):
        return "skipped", "; ".join(cast("CheckSkipped", e).reason for e in leaves)
    if all(type(e).__name__ == "Skipped" and "pytest" in type(e).__module__ for e in leaves):
        return "skipped", "; ".join(str(e) for e in leaves)
    if all(isinstance(e, AssertionError) for e in leaves):
        return "failed", "\n\n".join(_text(e) for e in leaves)
    return "error", (
        f"{type(error).__name__}: {_text(error)}\n(the check raised an exception instead of a "
        "verdict; when the implementation raised it, it likely violates the clause)"
    )


def _teardown_all(instances: list[object]) -> list[str]:
    problems: list[str] = []
    for instance in reversed(instances):
        teardown = getattr(instance, "teardown", None)
        if not callable(teardown):
            continue
        try:
            teardown()
        except Exception as error:
            problems.append(
                f"{type(instance).__qualname__}.teardown() raised {type(error).__name__}: {error}"
            )
    return problems


def _leftover_process_group() -> str | None:
    torch_distributed = sys.modules.get("torch.distributed")
    if torch_distributed is None:
        return None
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return None
    try:
        dist.destroy_process_group()
    except Exception as error:
        return (
            "the check left the default process group initialized and destroying it failed "
            f"({type(error).__name__}: {error})"
        )
    return "the check left the default process group initialized; the harness destroyed it"


def _run(task: RunTask, conn: Connection, config: WorkerConfig) -> dict[str, object]:
    from trainspec.conformance.distributed.context import RANK_CONTEXT_OPTION, RankContext
    from trainspec.errors import PeerFailureError

    started = time.perf_counter()
    os.environ["MASTER_PORT"] = str(task.main_port)
    sequence = 0

    def channel(payload: bytes) -> list[bytes]:
        nonlocal sequence
        sequence += 1
        conn.send(("exchange", task.task_id, sequence, payload))
        reply = conn.recv()
        if reply[0] == "exchanged" and reply[1] == task.task_id and reply[2] == sequence:
            return list(reply[3])
        if reply[0] == "exchange_failed":
            raise PeerFailureError(str(reply[3]))
        raise PeerFailureError(f"the harness answered exchange {sequence} with {reply[0]!r}")

    context = RankContext(
        rank=config.rank,
        world_size=config.world_size,
        local_rank=config.local_rank,
        device=config.device,
        backend=config.backend,
        main_address=config.main_address,
        main_port=task.main_port,
        shared_dir=task.shared_dir,
        check=task.check,
        channel=channel,
    )
    status, message, trace = "passed", "", ""
    clause, layer = "", "distributed"
    notes: list[str] = []
    made: list[object] = []
    try:
        body, clause, layer = _resolve(task.check, task.spec.kind)
        target = task.spec.build(
            {
                "device": config.device,
                "environment_factory": context.environment,
                RANK_CONTEXT_OPTION: context,
            }
        )
        original = target.factory

        def factory() -> object:
            instance = original()
            made.append(instance)
            return instance

        try:
            body(dataclasses.replace(target, factory=factory))
        finally:
            cleanup = _teardown_all(made)
        if cleanup:
            status = "error"
            message = (
                "the check passed, but tearing down the instances it made failed: "
                + "; ".join(cleanup)
                + ". teardown() must be idempotent and safe in any state."
            )
    except BaseException as error:  # a rank must report whatever happened
        status, message = _classify(error)
        trace = "".join(traceback.format_exception(type(error), error, error.__traceback__))
    leftover = _leftover_process_group()
    if leftover is not None:
        notes.append(leftover)
    return {
        "status": status,
        "message": message,
        "traceback": trace,
        "duration_s": time.perf_counter() - started,
        "clause": clause,
        "layer": layer,
        "notes": notes,
        "pid": os.getpid(),
    }


def _plan(task: PlanTask) -> dict[str, object]:
    from trainspec.conformance.runner import TargetSession, discover_version
    from trainspec.errors import ConfigurationError

    try:
        target = task.spec.build()
        session = TargetSession(target, layers=(), select=task.select, timeout_s=None)
        structure = [result.to_dict() for result in session.structure_results()]
        checks, problems = _all_checks(task.spec.kind)
    except ConfigurationError as error:
        return {"status": "configuration_error", "message": str(error)}
    wanted = None if task.select is None else set(task.select)
    listed = [
        {"name": c.name, "clause": c.clause, "layer": c.layer, "requires": sorted(c.requires)}
        for c in checks
        if c.layer in task.layers
        and c.layer != "structure"
        and (wanted is None or c.name in wanted or c.clause in wanted)
    ]
    return {
        "status": "ok",
        "name": target.display_name,
        "version": discover_version(target),
        "structure": structure,
        "checks": listed,
        "problems": problems,
    }
