"""The body of one rank process of a :class:`~trainspec.conformance.distributed.World`.

Runs in a process started with multiprocessing's ``spawn`` method. In this order it:

1. points file descriptor 2 at its per-rank stderr file (so that native crashes, c10d logs
   and faulthandler's dumps are captured), leaves its parent's process group (so the parent
   can kill it with everything it started, and a terminal's Ctrl-C reaches only the parent),
   enables faulthandler on fatal signals and registers a stack dump of every thread on
   ``SIGUSR1`` into its per-rank stack file;
2. sets its environment variables (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``,
   ``MASTER_ADDR``, ``MASTER_PORT``, ...) and arranges to end when the parent dies: on Linux
   the kernel's parent-death signal (``PR_SET_PDEATHSIG`` = SIGKILL, which needs no GIL, so
   a rank hung in C code holding it still dies with a parent killed by SIGTERM or SIGKILL),
   and everywhere a thread that polls ``getppid()``;
3. imports torch and the check modules once (:data:`DEFAULT_PRELOAD`, from the table of
   kinds), says ``ready``, and then runs tasks until told to stop. It sets up no process
   group itself: the checks set up the collective or strategy they test.

After every check it tears down the instances the check's factory made, then *observes*
what the implementation left behind: a default process group still initialised after every
instance's ``teardown()`` is reported as a failure of the kind's lifecycle clause
(:func:`lifecycle_clause`), and only then destroyed so that later checks can run; the
environment variables are restored (changes are noted). A member of the target that hung in
an earlier check (``RunTask.blocked``) is replaced on the instances the factory makes by one
that raises :class:`MemberBlocked`, which ends the check as ``blocked``. Nothing here is
public API.
"""

from __future__ import annotations

import dataclasses
import faulthandler
import importlib
import inspect
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
    from collections.abc import Callable, Mapping, Sequence
    from multiprocessing.connection import Connection

    from trainspec.conformance.core import Check, Kind, Target

__all__ = ["DEFAULT_PRELOAD", "MemberBlocked", "lifecycle_clause", "main", "members"]


def _check_modules_of_distributed_kinds() -> tuple[str, ...]:
    from trainspec.conformance.kinds import KIND_TABLE

    modules: list[str] = []
    for spec in KIND_TABLE.values():
        if spec.distributed_check_modules:
            modules += (*spec.check_modules, *spec.distributed_check_modules)
    return tuple(dict.fromkeys(modules))


DEFAULT_PRELOAD: Final = ("torch", *_check_modules_of_distributed_kinds())
"""Modules every rank imports at start: torch, and every check module the table of kinds lists
for the kinds that have distributed checks; a missing check module is skipped."""

_PARENT_POLL_S: Final = 0.5
_PR_SET_PDEATHSIG: Final = 1  # <linux/prctl.h>
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


def _die_with_parent(config: WorkerConfig) -> bool:
    """On Linux, have the kernel SIGKILL this rank when its parent dies; whether it is armed.

    The kernel fires when the *thread* that started this process exits, so the parent asks
    for it (``config.death_signal``) only from its main thread. ``getppid()`` is checked after
    arming: a parent that died before that would never fire it."""
    if not config.death_signal or not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) != 0:
            return False
    except (OSError, AttributeError):  # no libc prctl: the watcher thread remains
        return False
    if os.getppid() != config.parent_pid:
        os._exit(_EXIT_ORPHANED)
    return True


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
    _die_with_parent(config)
    _prepare_process(config)
    _watch_parent(config.parent_pid)  # the fallback, kept even with the kernel's signal
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
            conn.send(("result", task.task_id, _run(task, conn, config, baseline)))
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


def _all_checks(kind: Kind) -> tuple[list[Check], list[str]]:
    """Every check of ``kind`` on a world's ranks, as the table of kinds lists their modules
    (``checks_for(kind, distributed=True)``: behaviour, distributed and end-to-end, in layer
    order); plus problems to report. A check module that is not installed runs nothing, as in
    the in-process runner (the problem names it)."""
    from trainspec.conformance.core import checks_for
    from trainspec.conformance.kinds import kind_spec

    spec = kind_spec(kind)
    modules = (*spec.check_modules, *spec.distributed_check_modules)
    try:
        return checks_for(kind, distributed=True), []
    except ModuleNotFoundError as error:
        missing = error.name or ""
        if not any(m == missing or m.startswith(missing + ".") for m in modules):
            raise
        return [], [f"no checks are installed for kind {kind!r} ({missing} not found)"]


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


class MemberBlocked(BaseException):
    """Raised in a rank by a member of the target that hung in an earlier check.

    A ``BaseException`` (like ``KeyboardInterrupt``), so that neither the implementation's
    nor a check's ``except Exception`` turns it into a verdict about something else."""

    def __init__(self, member: str, cause: str) -> None:
        super().__init__(f"{member}() is blocked: it {cause}")
        self.member = member
        self.cause = cause


def _is_secondary(error: BaseException) -> bool:
    # The echo of another rank's failure (a collective that timed out or lost its peer),
    # as the reference launchers judge it, so that the report names the primary rank first.
    from trainspec.reference.launchers import is_secondary

    leaves = _leaves(error)
    return bool(leaves) and all(is_secondary(leaf) for leaf in leaves)


def _classify(error: BaseException) -> tuple[str, str]:
    from trainspec.conformance.core import CheckSkipped

    leaves = _leaves(error)
    blocked = [e for e in leaves if isinstance(e, MemberBlocked)]
    if blocked:
        first = blocked[0]
        return "blocked", (
            f"blocked: the check called {first.member}(), which {first.cause}; fix that hang "
            "first (the harness does not wait for it again)"
        )
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


def members(kind: str) -> frozenset[str]:
    """The names of the members of ``kind``'s protocol and of its optional (structural)
    protocols, from the kinds table; imports no torch, so that the parent can use it too."""
    from typing_extensions import get_protocol_members

    from trainspec.conformance.kinds import kind_spec

    spec = kind_spec(kind)
    names: set[str] = set(get_protocol_members(spec.protocol))
    for structural in spec.structural.values():
        names |= get_protocol_members(structural.protocol)
    return frozenset(names)


def lifecycle_clause(kind: str) -> str:
    """The clause ``kind``'s ``teardown()`` answers to (``COLL-5``, ``STRAT-4``): what a
    check leaves behind is filed under it."""
    from trainspec.conformance.kinds import kind_spec

    return kind_spec(kind).lifecycle_clause


def _block(instance: object, kind: str, blocked: Mapping[str, str]) -> None:
    """Replace, on ``instance``, each method in ``blocked`` by one that raises
    :class:`MemberBlocked` (properties and instances that take no attributes are left as
    they are: a hang there costs the watchdog's timeout again)."""
    known = members(kind)
    for name, cause in blocked.items():
        if name not in known or not inspect.isfunction(
            inspect.getattr_static(type(instance), name, None)
        ):
            continue
        try:
            object.__setattr__(instance, name, _refusal(name, cause))
        except (AttributeError, TypeError):
            return


def _refusal(member: str, cause: str) -> Callable[..., None]:
    def refuse(*args: object, **kwargs: object) -> None:
        raise MemberBlocked(member, cause)

    return refuse


def _left_behind() -> list[str]:
    """What the implementation left behind after every instance was torn down; each is
    cleaned up here (after being observed) so that the next check starts clean."""
    torch_distributed = sys.modules.get("torch.distributed")
    if torch_distributed is None:
        return []
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return []
    found = (
        "the default torch.distributed process group was still initialized after "
        "teardown() of every instance the check made (the harness creates none)"
    )
    try:
        dist.destroy_process_group()
    except Exception as error:
        found += f"; destroying it failed too ({type(error).__name__}: {error})"
    return [found]


def _environment_changes(baseline: Mapping[str, str]) -> list[str]:
    changed = sorted(
        {k for k in os.environ if k not in baseline}
        | {k for k, v in baseline.items() if os.environ.get(k) != v}
    )
    if not changed:
        return []
    return [
        "the check left environment variables changed (restored by the harness): "
        + ", ".join(changed[:10])
        + (", ..." if len(changed) > 10 else "")
    ]


def _run(
    task: RunTask, conn: Connection, config: WorkerConfig, baseline: Mapping[str, str]
) -> dict[str, object]:
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
    secondary = False
    made: list[object] = []
    cleanup: list[str] = []
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
            if task.blocked:
                _block(instance, task.spec.kind, task.blocked)
            return instance

        # Checks that start processes (DCKPT-2's kill check) import the factory by its path.
        factory.__wrapped__ = original  # type: ignore[attr-defined]

        try:
            body(dataclasses.replace(target, factory=factory))
        finally:
            cleanup = _teardown_all(made)
    except BaseException as error:  # a rank must report whatever happened
        status, message = _classify(error)
        secondary = status == "error" and _is_secondary(error)
        trace = "".join(traceback.format_exception(type(error), error, error.__traceback__))
    return {
        "status": status,
        "message": message,
        "traceback": trace,
        "duration_s": time.perf_counter() - started,
        "clause": clause,
        "layer": layer,
        "notes": _environment_changes({**baseline, "MASTER_PORT": str(task.main_port)}),
        "teardown": cleanup,
        "left_behind": _left_behind(),
        "secondary": secondary,
        "pid": os.getpid(),
    }


def _plan(task: PlanTask) -> dict[str, object]:
    from trainspec.conformance.runner import TargetSession, discover_version
    from trainspec.errors import ConfigurationError

    try:
        target = task.spec.build()
        session = TargetSession(
            target, layers=(), select=task.select, timeout_s=None, distributed=True
        )
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
        "capabilities": sorted(_effective_capabilities(target, session.protocols)),
    }


def _effective_capabilities(target: Target[object], protocols: Sequence[type]) -> set[str]:
    """What the report lists: the capabilities given and declared on the implementation
    (``target.capabilities``, merged when the target was built) and the structural ones the
    structure layer inferred (those whose protocol it checked)."""
    from trainspec.conformance.kinds import kind_spec

    structural = kind_spec(target.kind).structural
    inferred = {name for name, cap in structural.items() if cap.protocol in protocols}
    return set(target.capabilities) | inferred
