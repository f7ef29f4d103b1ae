"""``World``: N rank processes started once, then many checks run in them.

::

    with World(world_size=2) as world:                    # starts 2 ranks (spawn), once
        spec = TargetSpec("collective", "my_pkg.comm:MyCollective")
        result = world.run("check_collective_all_gather_matches_direct_computation", spec)
        result.status, [r.status for r in result.ranks]

Lifecycle::

    1) start()  (or entering the context) -- N processes, each imports torch and the checks
                                              once and waits; no process group is set up
    2) run(check, target, timeout_s)      -- every rank rebuilds the target from its spec, runs
                                              the check and answers; repeat
       a check past its timeout           -- the hung ranks' Python stacks are collected
                                              (SIGUSR1 -> faulthandler), every rank is killed,
                                              and the next run() starts a fresh world; the
                                              target's members on the hung stacks are
                                              *blocked* for that target: a later check that
                                              calls one ends at once as ``blocked`` (with the
                                              cause) instead of paying the timeout again
       a rank that dies                   -- reported by rank with its signal and stderr; the
                                              others get a grace period, then the same
    3) close()  (or leaving the context)  -- stop, then terminate, then kill; idempotent

No process outlives the World: ``close()`` kills what does not stop, a finalizer and an
``atexit`` hook do the same for a World that was never closed, every rank leaves its parent's
process group so that killing the group also ends what the rank started, and a rank whose
parent died is killed by the kernel (Linux ``PR_SET_PDEATHSIG``, for a World started from
the main thread; it works while the rank holds the GIL) or exits by itself within a second
(a watcher thread, everywhere).

A World has at most :func:`max_world_size` ranks (4 per CPU, at least 8, or
``TRAINSPEC_MAX_WORLD_SIZE``): every rank is a process that imports torch.

Each rank gets ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``, ``NODE_RANK``,
``MASTER_ADDR`` and ``MASTER_PORT``: a free port chosen at every start of the world, and a
fresh one again for every check (the rendezvous of one check never meets the remains of the
previous one). The checks set up the collective or strategy they test; strategies own their
process-group setup.

The stack dumps need ``SIGUSR1`` (POSIX). Not thread-safe: one thread drives a World.
"""

from __future__ import annotations

import atexit
import multiprocessing
import multiprocessing.connection
import multiprocessing.util  # registered before our atexit hook, so ours runs first
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
import weakref
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final

from trainspec.conformance.distributed import _worker
from trainspec.conformance.distributed._protocol import (
    PlanTask,
    RunTask,
    StopTask,
    WorkerConfig,
)
from trainspec.conformance.distributed.results import (
    DistributedResult,
    RankResult,
    RankStatus,
    combine,
)
from trainspec.conformance.distributed.spec import TargetSpec
from trainspec.conformance.fakes import free_port
from trainspec.errors import ConfigurationError, LaunchError, LifecycleError

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence
    from multiprocessing.connection import Connection
    from multiprocessing.process import BaseProcess

    from typing_extensions import Self


__all__ = [
    "DEFAULT_CHECK_TIMEOUT_S",
    "DEFAULT_CRASH_GRACE_S",
    "DEFAULT_START_TIMEOUT_S",
    "MAX_WORLD_SIZE_VARIABLE",
    "World",
    "max_world_size",
]

DEFAULT_CHECK_TIMEOUT_S: Final = 120.0
"""Seconds one check may run on the ranks before it is a hang."""
DEFAULT_START_TIMEOUT_S: Final = 180.0
"""Seconds the ranks may take to start (spawn, import torch and the checks)."""
DEFAULT_CRASH_GRACE_S: Final = 10.0
"""After a rank dies, seconds the others get to finish before they count as hung."""

_BACKENDS: Final = {"cpu": "gloo", "cuda": "nccl"}
_STOP_WAIT_S: Final = 5.0
_KILL_WAIT_S: Final = 5.0
_STACK_WAIT_S: Final = 3.0
_OUTPUT_LIMIT: Final = 64 * 1024
_DUMP_SIGNAL: Final = getattr(signal, "SIGUSR1", None)
MAX_WORLD_SIZE_VARIABLE: Final = "TRAINSPEC_MAX_WORLD_SIZE"
"""An environment variable that overrides :func:`max_world_size` (a whole number >= 1)."""
_RANKS_PER_CPU: Final = 4
_MIN_CAP: Final = 8
_WHOLE_TARGET: Final = "*"
"""The key of ``blocked`` members meaning every check of the target (its factory or its
``teardown()`` hung: no check can run without them)."""


def max_world_size() -> int:
    """The most ranks a World starts on this machine: ``TRAINSPEC_MAX_WORLD_SIZE`` if set,
    else 4 per CPU (``os.cpu_count()``) and at least 8. Every rank is a process that imports
    torch (hundreds of MB); far more ranks than CPUs only thrash, and thousands exhaust the
    process table. Raises :class:`~trainspec.ConfigurationError` for a malformed variable."""
    text = os.environ.get(MAX_WORLD_SIZE_VARIABLE, "").strip()
    if text:
        if not (text.isascii() and text.isdigit()) or int(text) < 1:
            raise ConfigurationError(
                f"{MAX_WORLD_SIZE_VARIABLE} must be a whole number of ranks >= 1; got {text!r}"
            )
        return int(text)
    return max(_MIN_CAP, _RANKS_PER_CPU * (os.cpu_count() or 1))


def _spec_key(spec: TargetSpec) -> str:
    return repr((spec.kind, spec.factory, spec.name, sorted(spec.options.items(), key=str)))


def _excluded_roots() -> tuple[str, ...]:
    """Directories whose frames are never the target's: the kit's and torch's (and the
    standard library's, :func:`_stdlib_roots`)."""
    import importlib.util

    roots = [os.path.dirname(os.path.dirname(os.path.abspath(_worker.__file__)))]
    try:
        spec = importlib.util.find_spec("torch")
    except (ImportError, ValueError):
        spec = None
    if spec is not None and spec.submodule_search_locations:
        roots.extend(os.path.abspath(p) for p in spec.submodule_search_locations)
    return tuple(os.path.join(root, "") for root in roots)


def _stdlib_roots() -> tuple[str, ...]:
    """The standard library's directory, unless installed packages live under it."""
    stdlib = os.path.dirname(os.path.abspath(os.__file__))
    if any(p.startswith(os.path.join(stdlib, "")) for p in sys.path if "-packages" in p):
        return ()
    return (os.path.join(stdlib, ""),)


def _members_on_stack(stack: str, members: frozenset[str], roots: tuple[str, ...]) -> list[str]:
    """The target's members in a faulthandler dump (most recent call first), outermost first:
    frames named after a protocol member in files outside the kit and torch."""
    found: list[str] = []
    for line in reversed(stack.splitlines()):
        text = line.strip()
        if not text.startswith('File "'):
            continue
        path, _, rest = text[len('File "') :].partition('"')
        name = rest.rpartition(" in ")[2].strip()
        if path.startswith("<"):  # "<string>" (the spawn bootstrap), "<frozen ...>"
            continue
        if name in members and not os.path.abspath(path).startswith(roots):
            if name not in found:
                found.append(name)
    return found


# --------------------------------------------------------------------------- process handling


def _kill(process: BaseProcess) -> None:
    """SIGKILL ``process`` and its process group (when it leads its own), then reap it."""
    pid = process.pid
    if pid is None:  # never started
        return
    if process.exitcode is None:
        try:
            # Until it is reaped the pid cannot be reused, so the group id is still its own.
            if os.getpgid(pid) == pid:
                os.killpg(pid, signal.SIGKILL)
            else:
                process.kill()
        except (ProcessLookupError, PermissionError, OSError):
            pass
    process.join(_KILL_WAIT_S)


class _Reaper:
    """The processes of one World, for the finalizer and the atexit hook (which must not
    hold a reference to the World itself)."""

    def __init__(self) -> None:
        self.processes: list[BaseProcess] = []

    def kill_all(self) -> None:
        processes, self.processes = [p for p in self.processes if p.pid is not None], []
        for process in processes:
            if process.exitcode is None:
                try:
                    process.terminate()
                except OSError:
                    pass
        for process in processes:
            process.join(1.0)
            _kill(process)


_LIVE: weakref.WeakSet[World] = weakref.WeakSet()


@atexit.register
def _close_live_worlds() -> None:
    # Registered after multiprocessing's own exit hook (imported above), so this runs before
    # multiprocessing joins its children: unclosed worlds are killed, not waited for.
    for world in list(_LIVE):
        world.terminate()


@dataclass
class _Rank:
    rank: int
    process: BaseProcess
    conn: Connection
    stderr_path: str
    stack_path: str
    pid: int | None = None


def _size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


def _read_from(path: str, offset: int, limit: int = _OUTPUT_LIMIT) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            end = f.tell()
            start = max(offset, end - limit)
            f.seek(start)
            data = f.read()
    except OSError:
        return ""
    text = data.decode("utf-8", errors="replace")
    return ("...\n" + text) if start > offset else text


def _signal_name(exitcode: int | None) -> str | None:
    if exitcode is None or exitcode >= 0:
        return None
    try:
        return signal.Signals(-exitcode).name
    except ValueError:
        return f"signal {-exitcode}"


@dataclass
class _Outcome:
    """What a task produced on the ranks it was sent to."""

    payloads: dict[int, dict[str, object]] = field(default_factory=dict)
    crashed: dict[int, int | None] = field(default_factory=dict)
    hung: list[int] = field(default_factory=list)
    stacks: dict[int, str] = field(default_factory=dict)
    stderr: dict[int, str] = field(default_factory=dict)
    hung_in: dict[int, list[str]] = field(default_factory=dict)
    crash_first: int | None = None
    duration_s: float = 0.0


# --------------------------------------------------------------------------- the world


class World:
    """``world_size`` rank processes on this machine that run conformance checks.

    ``device``: the device type the ranks use (``"cpu"``, or ``"cuda"`` and other accelerator
    types: rank *r* gets ``"<type>:<local_rank>"``). ``backend``: the c10d backend the checks
    are meant to use, default ``"gloo"`` on CPU and ``"nccl"`` on CUDA (required for other
    types); the checks' collectives choose their own, this is passed to them as the
    ``RankContext.backend``. ``init``: the rendezvous, ``"tcp"`` (``MASTER_ADDR`` and
    ``MASTER_PORT``; the only one). ``env`` adds environment variables to every rank;
    ``preload`` adds modules every rank imports at start.

    Bad arguments raise :class:`~trainspec.ConfigurationError`; a world whose ranks do not
    start raises :class:`~trainspec.LaunchError` naming the rank, with its stderr.
    """

    def __init__(
        self,
        world_size: int = 2,
        *,
        device: str = "cpu",
        backend: str | None = None,
        init: str = "tcp",
        main_address: str = "127.0.0.1",
        env: Mapping[str, str] | None = None,
        preload: Iterable[str] = (),
        start_timeout_s: float = DEFAULT_START_TIMEOUT_S,
        crash_grace_s: float = DEFAULT_CRASH_GRACE_S,
    ) -> None:
        if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
            raise ConfigurationError(f"World: world_size must be an int >= 1; got {world_size!r}")
        limit = max_world_size()
        if world_size > limit:
            raise ConfigurationError(
                f"World: world_size {world_size} is more ranks than this machine can run: at "
                f"most {limit} ({_RANKS_PER_CPU} per CPU of {os.cpu_count() or 1}, at least "
                f"{_MIN_CAP}; every rank is a process that imports torch). Use fewer ranks, "
                f"or set {MAX_WORLD_SIZE_VARIABLE} to raise the limit."
            )
        if not isinstance(device, str) or not device or ":" in device:
            raise ConfigurationError(
                f"World: device must be a device type such as 'cpu' or 'cuda' (each rank gets "
                f"its own index); got {device!r}"
            )
        if backend is None:
            backend = _BACKENDS.get(device)
            if backend is None:
                raise ConfigurationError(
                    f"World: no default c10d backend for device type {device!r} (defaults: "
                    f"{', '.join(f'{d} -> {b}' for d, b in _BACKENDS.items())}); pass backend="
                )
        if init != "tcp":
            raise ConfigurationError(
                f"World: init must be 'tcp' (rendezvous at MASTER_ADDR:MASTER_PORT, as "
                f"ClusterEnvironment describes it); got {init!r}"
            )
        for name, value in (("start_timeout_s", start_timeout_s), ("crash_grace_s", crash_grace_s)):
            if not isinstance(value, (int, float)) or value <= 0:
                raise ConfigurationError(f"World: {name} must be a positive number; got {value!r}")
        if isinstance(preload, str):
            raise ConfigurationError(f"World: preload must be a list of modules, not {preload!r}")
        self._world_size = world_size
        self._device = device
        self._backend = backend
        self._main_address = main_address
        self._extra_env = dict(env or {})
        self._preload = (*_worker.DEFAULT_PRELOAD, *preload)
        self._start_timeout_s = float(start_timeout_s)
        self._crash_grace_s = float(crash_grace_s)
        self._ranks: list[_Rank] = []
        self._run_dir: str | None = None
        self._starts = 0
        self._task_id = 0
        self._closed = False
        self._known: dict[str, tuple[str, str]] = {}
        self._blocked: dict[str, dict[str, str]] = {}
        self._reaper = _Reaper()
        self._finalizer = weakref.finalize(self, self._reaper.kill_all)
        _LIVE.add(self)

    def __repr__(self) -> str:
        state = "closed" if self._closed else ("running" if self._ranks else "not started")
        return (
            f"World(world_size={self._world_size}, device={self._device!r}, "
            f"backend={self._backend!r}, {state})"
        )

    # -- properties ---------------------------------------------------------------------------

    @property
    def world_size(self) -> int:
        """The number of ranks."""
        return self._world_size

    @property
    def device(self) -> str:
        """The device type of the ranks."""
        return self._device

    @property
    def backend(self) -> str:
        """The c10d backend the world is meant for."""
        return self._backend

    @property
    def running(self) -> bool:
        """Whether rank processes are started (``False`` before the first run and after a
        hang or crash until the next run restarts them)."""
        return bool(self._ranks)

    @property
    def starts(self) -> int:
        """How many times the ranks were started (1 + the restarts after hangs and crashes)."""
        return self._starts

    @property
    def pids(self) -> tuple[int, ...]:
        """The process ids of the running ranks, by rank (empty when not running)."""
        return tuple(r.process.pid for r in self._ranks if r.process.pid is not None)

    # -- lifecycle ----------------------------------------------------------------------------

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def start(self) -> None:
        """Start the ranks and wait until each has imported torch and the checks.

        Does nothing when they are running. Raises :class:`~trainspec.LifecycleError` after
        :meth:`close`, :class:`~trainspec.LaunchError` when a rank dies or is not ready within
        ``start_timeout_s`` (every rank is killed then).
        """
        if self._closed:
            raise LifecycleError("World.start(): the world is closed; make a new World.")
        if self._ranks:
            return
        if self._run_dir is None:
            self._run_dir = tempfile.mkdtemp(prefix="trainspec-world-")
        start_dir = os.path.join(self._run_dir, f"start-{self._starts}")
        os.makedirs(start_dir, exist_ok=True)
        port = free_port(self._main_address)
        context = multiprocessing.get_context("spawn")
        try:
            for rank in range(self._world_size):
                env = {
                    **self._extra_env,
                    "RANK": str(rank),
                    "WORLD_SIZE": str(self._world_size),
                    "LOCAL_RANK": str(rank),
                    "LOCAL_WORLD_SIZE": str(self._world_size),
                    "NODE_RANK": "0",
                    "MASTER_ADDR": self._main_address,
                    "MASTER_PORT": str(port),
                }
                config = WorkerConfig(
                    rank=rank,
                    world_size=self._world_size,
                    local_rank=rank,
                    device=self._device if self._device == "cpu" else f"{self._device}:{rank}",
                    backend=self._backend,
                    main_address=self._main_address,
                    env=env,
                    stderr_path=os.path.join(start_dir, f"rank{rank}.stderr"),
                    stack_path=os.path.join(start_dir, f"rank{rank}.stacks"),
                    parent_pid=os.getpid(),
                    preload=self._preload,
                    death_signal=threading.current_thread() is threading.main_thread(),
                )
                parent_end, child_end = context.Pipe(duplex=True)
                process = context.Process(
                    target=_worker.main,
                    args=(config, child_end),
                    name=f"trainspec-world-rank{rank}",
                )
                try:
                    process.start()
                except OSError as error:  # EAGAIN (process table), ENOMEM, EMFILE, ...
                    raise LaunchError(
                        f"World: rank {rank} of {self._world_size} could not be started "
                        f"({type(error).__name__}: {error}); this machine cannot run "
                        f"{self._world_size} ranks now, use fewer",
                        rank=rank,
                    ) from error
                self._reaper.processes.append(process)
                child_end.close()
                self._ranks.append(
                    _Rank(
                        rank,
                        process,
                        parent_end,  # pyright: ignore[reportArgumentType]  (PipeConnection on Windows)
                        config.stderr_path,
                        config.stack_path,
                    )
                )
        except BaseException:  # a rank that could not start: end those that did
            self._kill_ranks()
            raise
        self._starts += 1
        self._await_ready()

    def _await_ready(self) -> None:
        deadline = time.monotonic() + self._start_timeout_s
        waiting = {r.rank for r in self._ranks}
        problem: tuple[int, str] | None = None
        while waiting and problem is None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                rank = min(waiting)
                problem = (
                    rank,
                    f"rank {rank} was not ready within {self._start_timeout_s:g} s "
                    "(start_timeout_s)",
                )
                break
            ranks = [self._ranks[r] for r in waiting]
            handles: list[Connection | int] = [r.conn for r in ranks]
            handles += [r.process.sentinel for r in ranks]
            for handle in multiprocessing.connection.wait(handles, remaining):
                entry = next(r for r in ranks if handle in (r.conn, r.process.sentinel))
                message = self._receive(entry)
                if message == ():
                    continue
                if message is not None and message[0] == "ready":
                    entry.pid = message[1] if isinstance(message[1], int) else None
                    waiting.discard(entry.rank)
                elif message is not None and message[0] == "start_failed":
                    problem = (entry.rank, f"rank {entry.rank} failed to start:\n{message[1]}")
                    break
                elif message is None:
                    entry.process.join(1.0)
                    how = _signal_name(entry.process.exitcode) or (
                        f"exit code {entry.process.exitcode}"
                    )
                    problem = (entry.rank, f"rank {entry.rank} died while starting ({how})")
                    break
        if problem is not None:
            rank, text = problem
            stderr = _read_from(self._ranks[rank].stderr_path, 0)
            self._kill_ranks()
            raise LaunchError(
                f"World: {text}" + (f"\nits stderr:\n{stderr}" if stderr.strip() else ""),
                rank=rank,
            )

    @staticmethod
    def _receive(entry: _Rank) -> tuple[object, ...] | None:
        """The next message from ``entry``, or None when its pipe is closed (it died)."""
        try:
            if not entry.conn.poll():
                return None if entry.process.exitcode is not None or _dead(entry) else ()
            message = entry.conn.recv()
        except (EOFError, OSError):
            return None
        return message if isinstance(message, tuple) else ()

    def close(self) -> None:
        """Stop the ranks (a stop message, then terminate, then kill) and remove the world's
        files. Idempotent; the World cannot be started again."""
        if self._closed:
            return
        self._closed = True
        for entry in self._ranks:
            try:
                entry.conn.send(StopTask())
            except (OSError, ValueError):
                pass
        deadline = time.monotonic() + _STOP_WAIT_S
        for entry in self._ranks:
            entry.process.join(max(0.0, deadline - time.monotonic()))
        self._kill_ranks()
        self._finish()

    def terminate(self) -> None:
        """Kill the ranks at once, without asking them to stop, and close the world."""
        if self._closed:
            return
        self._closed = True
        self._kill_ranks()
        self._finish()

    def _finish(self) -> None:
        if self._run_dir is not None:
            shutil.rmtree(self._run_dir, ignore_errors=True)
            self._run_dir = None
        self._finalizer.detach()
        _LIVE.discard(self)

    def _kill_ranks(self) -> None:
        for entry in self._ranks:
            if entry.process.exitcode is None:
                try:
                    entry.process.terminate()
                except OSError:
                    pass
        for entry in self._ranks:
            entry.process.join(1.0)
            _kill(entry.process)
            entry.conn.close()
        self._ranks = []
        self._reaper.processes = []

    # -- running checks -----------------------------------------------------------------------

    def run(
        self,
        check: str,
        target: TargetSpec | object,
        timeout_s: float = DEFAULT_CHECK_TIMEOUT_S,
    ) -> DistributedResult:
        """Run ``check`` on every rank against ``target`` and combine the ranks' outcomes.

        ``check`` is the name of a registered check of the target's kind, or
        ``"package.module:function"`` naming a function that takes a Target. ``target`` is a
        :class:`TargetSpec` or anything :meth:`TargetSpec.of` accepts. Each rank rebuilds the
        target with the options ``device`` (its device), ``environment_factory`` (a
        ClusterEnvironment describing it) and ``rank_context`` (its
        :class:`~trainspec.conformance.distributed.RankContext`) added.

        Starts the world if needed. Never hangs: after ``timeout_s`` seconds the ranks that
        have not finished are reported with their stacks and the world is killed (the next
        call starts it again). The target's members on the hung ranks' stacks are then
        blocked for this target (the same kind, factory, name and options): a later check
        that calls one of them is ``blocked`` at that call, naming the hang, and when the
        factory or ``teardown()`` hung every later check of the target is ``blocked`` without
        running. What the implementation left behind although every instance was torn down
        is on the result (:attr:`DistributedResult.teardown_problems`). Raises only for bad
        arguments
        (:class:`~trainspec.ConfigurationError`) or a world that cannot start
        (:class:`~trainspec.LaunchError`); an unknown check name or a factory that does not
        import in the ranks is an ``error`` result from every rank.
        """
        spec = target if isinstance(target, TargetSpec) else TargetSpec.of(target)
        if not isinstance(timeout_s, (int, float)) or timeout_s <= 0:
            raise ConfigurationError(f"World.run: timeout_s must be positive; got {timeout_s!r}")
        key = _spec_key(spec)
        blocked = dict(self._blocked.get(key, {}))
        if _WHOLE_TARGET in blocked:
            return self._blocked_everywhere(check, spec, blocked[_WHOLE_TARGET])
        self.start()
        assert self._run_dir is not None
        self._task_id += 1
        shared_dir = tempfile.mkdtemp(prefix=f"check{self._task_id}-", dir=self._run_dir)
        task = RunTask(
            task_id=self._task_id,
            check=check,
            spec=spec,
            main_port=free_port(self._main_address),
            shared_dir=shared_dir,
            blocked=blocked,
        )
        try:
            outcome = self._dispatch(list(range(self._world_size)), task, float(timeout_s))
        finally:
            shutil.rmtree(shared_dir, ignore_errors=True)
        restarted = bool(outcome.crashed or outcome.hung)
        if restarted:
            self._kill_ranks()
        for payload in outcome.payloads.values():
            clause, layer = str(payload.get("clause", "")), str(payload.get("layer", ""))
            self._known[check] = (clause, layer)
        clause, layer = self._known.get(check, ("", "distributed"))
        if outcome.hung:
            self._block_hung(key, spec, check, outcome, float(timeout_s))
        ranks = [self._rank_result(r, outcome, float(timeout_s)) for r in range(self._world_size)]
        return combine(
            check,
            clause,
            layer,
            ranks,
            duration_s=outcome.duration_s,
            timeout_s=float(timeout_s),
            restarted=restarted,
            lifecycle_clause=_worker.lifecycle_clause(spec.kind),
        )

    def blocked_members(self, target: TargetSpec | object) -> dict[str, str]:
        """The members of ``target`` that hung in an earlier :meth:`run` -> why (``"*"``:
        every check of the target, its factory or ``teardown()`` hung)."""
        spec = target if isinstance(target, TargetSpec) else TargetSpec.of(target)
        return dict(self._blocked.get(_spec_key(spec), {}))

    def _block_hung(
        self, key: str, spec: TargetSpec, check: str, outcome: _Outcome, timeout_s: float
    ) -> None:
        known = _worker.members(spec.kind)
        roots = (*_excluded_roots(), *_stdlib_roots())
        factory = spec.factory.rpartition(":")[2].rpartition(".")[2]
        blocked = self._blocked.setdefault(key, {})
        ranks = ", ".join(str(r) for r in outcome.hung)
        for rank in outcome.hung:
            stack = outcome.stacks.get(rank, "")
            found = _members_on_stack(stack, known, roots)
            outcome.hung_in[rank] = found
            whole = None
            if "teardown" in found:
                whole = "teardown()"
            elif not found and _members_on_stack(
                stack, frozenset({factory, "__init__", "<module>"}), roots
            ):
                whole = f"importing or calling the factory {spec.factory}"
            if whole is not None:
                blocked[_WHOLE_TARGET] = (
                    f"{whole} hung on rank(s) {ranks} in {check} (not finished within "
                    f"{timeout_s:g} s), and every check needs it"
                )
            for member in found:
                blocked.setdefault(
                    member,
                    f"hung on rank(s) {ranks} in {check} (not finished within {timeout_s:g} s)",
                )

    def _blocked_everywhere(self, check: str, spec: TargetSpec, why: str) -> DistributedResult:
        clause, layer = self._known.get(check, ("", "distributed"))
        message = f"blocked: {why}; fix that hang first (the harness does not wait for it again)"
        ranks = [
            RankResult(rank=r, status="blocked", message=message) for r in range(self.world_size)
        ]
        return combine(
            check,
            clause,
            layer,
            ranks,
            duration_s=0.0,
            timeout_s=0.0,
            restarted=False,
            lifecycle_clause=_worker.lifecycle_clause(spec.kind),
        )

    def plan(
        self,
        target: TargetSpec,
        layers: Sequence[str],
        select: Sequence[str] | None = None,
        timeout_s: float = DEFAULT_CHECK_TIMEOUT_S,
    ) -> dict[str, object]:
        """On rank 0: validate ``target`` with the kit's runner, run its structure layer and
        list the checks of ``layers`` (and ``select``). Used by
        :func:`~trainspec.conformance.distributed.verify_distributed`; the answer is a dict
        of plain data. Raises :class:`~trainspec.ConfigurationError` for a bad configuration
        and :class:`~trainspec.LaunchError` when rank 0 dies or hangs meanwhile."""
        self.start()
        self._task_id += 1
        task = PlanTask(
            self._task_id, target, tuple(layers), None if select is None else tuple(select)
        )
        outcome = self._dispatch([0], task, timeout_s)
        if outcome.crashed or outcome.hung:
            self._kill_ranks()
            result = self._rank_result(0, outcome, timeout_s)
            raise LaunchError(
                f"World.plan: rank 0 did not finish loading {target.factory!r}:\n"
                + result.describe(),
                rank=0,
            )
        payload = outcome.payloads[0]
        if payload.get("status") == "configuration_error":
            raise ConfigurationError(str(payload.get("message", "")))
        for item in payload.get("checks", []):  # type: ignore[attr-defined]
            self._known[str(item["name"])] = (str(item["clause"]), str(item["layer"]))
        return payload

    def _dispatch(self, ranks: list[int], task: RunTask | PlanTask, timeout_s: float) -> _Outcome:
        started = time.monotonic()
        entries = {r: self._ranks[r] for r in ranks}
        offsets = {r: _size(e.stderr_path) for r, e in entries.items()}
        outcome = _Outcome()
        pending: set[int] = set()
        for r, entry in entries.items():
            try:
                entry.conn.send(task)
                pending.add(r)
            except (OSError, ValueError):
                entry.process.join(1.0)
                outcome.crashed[r] = entry.process.exitcode
        exchanges: dict[int, dict[int, bytes]] = {}
        deadline = started + timeout_s
        grace_until = started + self._crash_grace_s if outcome.crashed else None
        if outcome.crashed:
            outcome.crash_first = min(outcome.crashed)
        while pending:
            now = time.monotonic()
            limit = deadline if grace_until is None else min(deadline, grace_until)
            if now >= limit:
                break
            live = [entries[r] for r in pending]
            handles: list[Connection | int] = [e.conn for e in live]
            handles += [e.process.sentinel for e in live]
            for handle in multiprocessing.connection.wait(handles, limit - now):
                entry = next(e for e in live if handle in (e.conn, e.process.sentinel))
                if entry.rank not in pending:
                    continue
                message = self._receive(entry)
                if message is None:
                    entry.process.join(1.0)
                    outcome.crashed[entry.rank] = entry.process.exitcode
                    pending.discard(entry.rank)
                    if outcome.crash_first is None:
                        outcome.crash_first = entry.rank
                    if grace_until is None:
                        grace_until = time.monotonic() + self._crash_grace_s
                elif len(message) >= 3 and message[1] == task.task_id:
                    if message[0] == "result" and isinstance(message[2], dict):
                        outcome.payloads[entry.rank] = message[2]
                        pending.discard(entry.rank)
                    elif message[0] == "exchange" and len(message) == 4:
                        seq, payload = message[2], message[3]
                        if isinstance(seq, int) and isinstance(payload, bytes):
                            exchanges.setdefault(seq, {})[entry.rank] = payload
                self._settle(exchanges, entries, pending, task.task_id)
        outcome.hung = sorted(pending)
        if outcome.hung:
            outcome.stacks = self._dump_stacks([entries[r] for r in outcome.hung])
        for r in list(outcome.crashed) + outcome.hung:
            outcome.stderr[r] = _read_from(entries[r].stderr_path, offsets[r])
        outcome.duration_s = time.monotonic() - started
        return outcome

    @staticmethod
    def _settle(
        exchanges: dict[int, dict[int, bytes]],
        entries: Mapping[int, _Rank],
        pending: set[int],
        task_id: int,
    ) -> None:
        """Answer every exchange that every rank has sent, and fail those that a rank that
        finished or died can no longer send."""
        for seq in sorted(exchanges):
            got = exchanges[seq]
            if len(got) == len(entries):
                reply: tuple[object, ...] = (
                    "exchanged",
                    task_id,
                    seq,
                    [got[r] for r in sorted(entries)],
                )
            else:
                gone = [r for r in entries if r not in got and r not in pending]
                if not gone:
                    continue
                reply = (
                    "exchange_failed",
                    task_id,
                    seq,
                    f"rank {gone[0]} finished the check or died without taking part in "
                    f"harness exchange #{seq}; every rank must call RankContext.exchange the "
                    "same number of times",
                )
            for r in got:
                if r in pending:
                    try:
                        entries[r].conn.send(reply)
                    except (OSError, ValueError):
                        pass
            del exchanges[seq]

    def _dump_stacks(self, hung: list[_Rank]) -> dict[int, str]:
        if _DUMP_SIGNAL is None:
            return {e.rank: "(no stack: this platform has no SIGUSR1)" for e in hung}
        before = {e.rank: _size(e.stack_path) for e in hung}
        for entry in hung:
            if entry.process.pid is not None and entry.process.exitcode is None:
                try:
                    os.kill(entry.process.pid, _DUMP_SIGNAL)
                except OSError:
                    pass
        deadline = time.monotonic() + _STACK_WAIT_S
        last: dict[int, int] = {}
        while time.monotonic() < deadline:
            time.sleep(0.1)
            now = {e.rank: _size(e.stack_path) for e in hung}
            if all(now[r] > before[r] for r in now) and now == last:
                break
            last = now
        return {
            e.rank: _read_from(e.stack_path, before[e.rank]) or "(the rank wrote no stack)"
            for e in hung
        }

    def _rank_result(self, rank: int, outcome: _Outcome, timeout_s: float) -> RankResult:
        payload = outcome.payloads.get(rank)
        if payload is not None:
            status = str(payload.get("status", "error"))
            notes = payload.get("notes", [])
            pid = payload.get("pid")
            duration = payload.get("duration_s", 0.0)
            left = payload.get("left_behind", [])
            raised = payload.get("teardown", [])
            return RankResult(
                rank=rank,
                status=_rank_status(status),
                message=str(payload.get("message", "")),
                traceback=str(payload.get("traceback", "")),
                duration_s=float(duration) if isinstance(duration, (int, float)) else 0.0,
                pid=pid if isinstance(pid, int) else None,
                notes=tuple(str(n) for n in notes) if isinstance(notes, list) else (),
                teardown=tuple(str(n) for n in raised) if isinstance(raised, list) else (),
                left_behind=tuple(str(n) for n in left) if isinstance(left, list) else (),
                secondary=payload.get("secondary") is True,
            )
        if rank in outcome.crashed:
            exitcode = outcome.crashed[rank]
            name = _signal_name(exitcode)
            how = f"killed by {name}" if name else f"exited with code {exitcode}"
            return RankResult(
                rank=rank,
                status="crashed",
                message=f"the rank's process died during the check ({how})",
                exitcode=exitcode,
                signal=name,
                stderr=outcome.stderr.get(rank, ""),
            )
        if outcome.crash_first is not None:
            why = (
                f"did not finish within {self._crash_grace_s:g} s after rank "
                f"{outcome.crash_first} died (or within the timeout of {timeout_s:g} s)"
            )
        else:
            why = f"did not finish within the timeout of {timeout_s:g} s"
        return RankResult(
            rank=rank,
            status="timeout",
            message=why,
            stack=outcome.stacks.get(rank, ""),
            stderr=outcome.stderr.get(rank, ""),
            hung_in=tuple(outcome.hung_in.get(rank, ())),
        )


def _dead(entry: _Rank) -> bool:
    return not entry.process.is_alive()


def _rank_status(value: str) -> RankStatus:
    statuses: tuple[RankStatus, ...] = (
        "passed",
        "failed",
        "skipped",
        "error",
        "timeout",
        "crashed",
        "blocked",
    )
    for status in statuses:
        if status == value:
            return status
    return "error"
