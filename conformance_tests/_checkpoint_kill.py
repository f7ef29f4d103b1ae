"""Kill a checkpoint save with SIGKILL at chosen points, from a clean child process (CKPT-3).

The atomicity clause is *decided by a process killed with SIGKILL at random points of a large
save*. The kit cannot fork itself for that (it may hold threads: hypothesis, an asynchronous
IO's worker, the harness), so it forks its writers from clean processes of its own:

- one *server*: a fresh Python process that imports torch once, single-threaded, started the
  first time a :class:`KillServer` is entered and reused by every later one of this process
  (one ``import torch`` per verify run, not one per target; closed at exit);
- per :class:`KillServer` (per target), a *factory process* forked from the server, which
  imports the target's factory (with the caller's ``sys.path``, working directory and
  environment at that moment) and builds the two checkpoints; it serves the trials and exits
  when the ``KillServer`` is left, so nothing one factory imports is seen by another;
- per trial, a *writer* forked from the factory process: it builds an instance with the factory
  and saves the two recognisable checkpoints A and B over the path in turn, until the factory
  process kills it:

  - after a delay (a random point of the save), or
  - the moment the path itself changes (``lstat`` of the path, and of the entries of a
    directory layout): the instant an in-place writer truncates the old file, or a two-step
    writer removes it, the writer dies there. An atomic writer's first change is the commit (a
    rename): killing right after it leaves the new checkpoint. As the polling may be
    descheduled on a busy machine, the writer also arms a timer at its first Python-level
    in-place change of the path (an audit event before opening it for writing, truncating or
    removing it) whose SIGALRM, at its default action, ends it as abruptly as SIGKILL a
    fraction of a millisecond later, even in the middle of one long copy.

The parent (the check) then loads the path with a fresh instance and decides. The same writer
loop serves ``scripts/soak_checkpoint_crash.py``'s idea of a soak, bounded to a few trials.

The factory process also runs *interrupt trials* (CKPT-14, :meth:`KillServer.interrupt`): a
child forked per trial saves checkpoint A, then saves B (or loads) with a profile function
that raises ``KeyboardInterrupt`` at the k-th *interrupt point* of the call -- an entry into a
Python function or a return from a call into C, the points where CPython runs a signal
handler (``sys.setprofile`` reports exactly those) -- and reports how the call ended, where
the interrupt was raised, whether the process survived a garbage collection (late
destructors) and whether ``teardown`` returned.

Run as a script (``python _checkpoint_kill.py``) it is the server: it imports nothing from
``trainspec.conformance`` (so starting it costs one ``import torch``), takes the parent's
``sys.path`` and reads one JSON request per line; it answers with lines starting with
``@@trainspec-kill``, so a factory that prints cannot confuse the protocol. The server runs in
a session of its own (a terminal's Ctrl-C reaches only the kit) and ends when the kit's end of
its standard input closes.

POSIX only (fork, SIGKILL).
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from typing import IO, TYPE_CHECKING, Any, Final

from typing_extensions import Self

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Mapping
    from types import FrameType

    import torch

__all__ = ["InterruptOutcome", "KillOutcome", "KillServer", "KillServerError", "kill_checkpoints"]

_REPLY = "@@trainspec-kill "
_START_TIMEOUT_S = 120.0
_ENV = "TRAINSPEC_KILL_SERVER"
# Take the parent's sys.path before anything else is imported, then run this file as the server
# (running it directly would put this package's folder first on sys.path).
_BOOT = (
    "import json, os, runpy, sys; "
    f"sys.path[:] = json.loads(os.environ[{_ENV!r}])['sys_path']; "
    "runpy.run_path(sys.argv[1], run_name='__main__')"
)


def kill_checkpoints(numel: int, dtype: torch.dtype) -> tuple[dict[str, object], ...]:
    """Checkpoints A and B: two flat tensors of ``numel`` elements each, all 0 in A and all 1
    in B (distinct in every dtype), so a torn or mixed load differs from both."""
    import torch

    return tuple(
        {
            "first": torch.full((numel,), fill, dtype=dtype),
            "second": torch.full((numel,), fill, dtype=dtype),
        }
        for fill in (0, 1)
    )


@dataclass(frozen=True)
class KillOutcome:
    """What happened to one writer."""

    started: bool
    """The writer built its instance and began saving."""
    killed: bool
    """It died of the server's SIGKILL (otherwise it exited by itself)."""
    changed: bool
    """The path changed before the kill (change-triggered trials)."""
    saves: int
    """Saves it completed before the kill."""
    error: str
    """What the writer reported when it exited by itself (an exception's repr)."""


@dataclass(frozen=True)
class InterruptOutcome:
    """What happened to one interrupt trial (see the module's docstring)."""

    started: bool
    """The child built its instance and saved checkpoint A."""
    ended: str
    """How the call ended: ``"interrupted"`` (it raised the KeyboardInterrupt itself),
    ``"raised"`` (something else), ``"returned"``, or ``""`` when the child died first."""
    fired: bool
    """The interrupt was raised (the call reached point ``at``)."""
    points: int
    """Interrupt points the call passed."""
    where: str
    """Where the interrupt was raised: ``"module function (file:line)"``."""
    module: str
    """The module of the frame the interrupt was raised in."""
    error: str
    """For ``"raised"``: the exception and its cause/context chain; otherwise what the child
    reported when it failed before the call."""
    survived: bool
    """The child was alive after a garbage collection following the call."""
    torn_down: bool
    """``teardown()`` returned (or raised) in time after that."""
    status: str
    """How the child ended when it did not report everything (a signal, an exit status, or
    "killed after the timeout")."""
    carried: bool = False
    """For ``"raised"``: the exception carries the interrupt (wraps or replaces it, in its
    cause/context or as data); otherwise the interrupt was lost before it was raised."""
    own: tuple[int, ...] = ()
    """For a counting trial: the points in the implementation's own package."""
    importing: tuple[int, ...] = ()
    """For a counting trial: the points inside an import (not tried)."""
    point: Mapping[str, str | int] = field(default_factory=dict)
    """Where the interrupt was raised, to find it again: ``event`` ("call" or "c_return"),
    ``function``, ``file`` (base name), ``line``, ``called`` (the C function a "c_return"
    returned from) and ``module``."""


class KillServerError(RuntimeError):
    """The server process could not start or stopped answering."""


def _sys_path() -> list[str]:
    return [p or os.getcwd() for p in sys.path]


class _Server:
    """The server process (see the module's docstring) and its end of the protocol."""

    def __init__(self) -> None:
        self.owner = os.getpid()
        self.lock = threading.Lock()
        """Held by the :class:`KillServer` using it (one factory process at a time)."""
        self.pending = 0
        """Requests sent and not answered: a server left with one is not reused."""
        self._ready = False
        self._buffer = b""
        self._stderr: IO[bytes] = tempfile.TemporaryFile()
        env = dict(os.environ)
        env[_ENV] = json.dumps({"sys_path": _sys_path()})
        env.setdefault("OMP_NUM_THREADS", "1")
        self.process = subprocess.Popen(
            [sys.executable, "-u", "-c", _BOOT, os.path.abspath(__file__)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            env=env,
            cwd=os.getcwd(),
            start_new_session=True,
        )

    def usable(self) -> bool:
        return self.owner == os.getpid() and self.pending == 0 and self.process.poll() is None

    def ready(self) -> None:
        """Wait for the server's first answer (torch imported)."""
        if not self._ready:
            self.pending += 1
            reply = self.reply(_START_TIMEOUT_S)
            if "fatal" in reply:
                raise KillServerError(str(reply["fatal"]))
            self._ready = True

    def send(self, message: dict[str, object]) -> None:
        stdin = self.process.stdin
        assert stdin is not None
        self.pending += 1
        try:
            stdin.write((json.dumps(message) + "\n").encode())
            stdin.flush()
        except OSError as exc:
            raise KillServerError(f"the kill server is gone: {exc!r}") from exc

    def reply(self, timeout_s: float) -> dict[str, object]:
        """The next answer (raises :class:`KillServerError` when none comes in time)."""
        stdout = self.process.stdout
        assert stdout is not None
        deadline = time.monotonic() + timeout_s
        fd = stdout.fileno()
        poller = select.poll()  # not select(): the kit may hold more than FD_SETSIZE files
        poller.register(fd, select.POLLIN)
        while True:
            while b"\n" in self._buffer:
                line, self._buffer = self._buffer.split(b"\n", 1)
                text = line.decode(errors="replace")
                if text.startswith(_REPLY):
                    answer: dict[str, object] = json.loads(text[len(_REPLY) :])
                    self.pending -= 1
                    return answer
            left = deadline - time.monotonic()
            if left <= 0:
                raise KillServerError(f"the kill server did not answer within {timeout_s:.0f}s")
            if poller.poll(left * 1000):
                chunk = os.read(fd, 65536)
                if not chunk:
                    raise KillServerError(
                        f"the kill server exited (code {self.process.wait()}): "
                        f"{self.stderr_tail(0)}"
                    )
                self._buffer += chunk

    def stderr_size(self) -> int:
        return self._stderr.seek(0, os.SEEK_END)

    def stderr_tail(self, start: int, limit: int = 2000) -> str:
        """The end of what the server wrote to stderr after offset ``start``."""
        self._stderr.seek(start)
        return self._stderr.read().decode(errors="replace")[-limit:]

    def close(self) -> None:
        """End the server and everything it forked (its session's process group)."""
        if self.owner != os.getpid():
            return  # a copy inherited through fork: the process belongs to the parent
        process = self.process
        if process.poll() is None:
            with contextlib.suppress(OSError):
                os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        for stream in (process.stdin, process.stdout):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()
        self._stderr.close()


_shared: _Server | None = None
_shared_guard = threading.Lock()


def _close_shared() -> None:
    global _shared
    with _shared_guard:
        server, _shared = _shared, None
    if server is not None:
        server.close()


atexit.register(_close_shared)


def _acquire() -> tuple[_Server, bool]:
    """This process's shared server, locked for the caller, started if needed; while another
    thread holds it, a private one. Returns the server and whether it is private."""
    global _shared
    with _shared_guard:
        server = _shared
        if server is None or not server.usable():
            if server is not None:
                server.close()
            server = _shared = _Server()
        if server.lock.acquire(blocking=False):
            return server, False
    private = _Server()
    private.lock.acquire()
    return private, True


def _release(server: _Server, private: bool) -> None:
    global _shared
    if private or not server.usable():
        with _shared_guard:
            if _shared is server:
                _shared = None
        server.close()
    server.lock.release()


class KillServer:
    """Writers to kill for one factory (a context manager): a factory process forked from the
    shared server (see the module's docstring) that imports ``module:qualname`` when entered
    and exits when left.

    ``numel`` and ``dtype`` size the checkpoints of :func:`kill_checkpoints`.
    """

    def __init__(self, module: str, qualname: str, *, numel: int, dtype: torch.dtype) -> None:
        self._args = {
            "module": module,
            "qualname": qualname,
            "numel": numel,
            "dtype": str(dtype).removeprefix("torch."),
        }
        self._server: _Server | None = None
        self._private = False
        self._open = False
        self._stderr_from = 0

    def __enter__(self) -> Self:
        server, self._private = _acquire()
        self._server = server
        try:
            server.ready()
            self._stderr_from = server.stderr_size()
            server.send(
                {
                    "open": {
                        **self._args,
                        "sys_path": _sys_path(),
                        "cwd": os.getcwd(),
                        "env": dict(os.environ),
                    }
                }
            )
            reply = server.reply(_START_TIMEOUT_S)
            if "fatal" in reply:
                server.reply(_START_TIMEOUT_S)  # the factory process exited: "closed"
                raise KillServerError(str(reply["fatal"]))
            if reply.get("ready") is not True:
                raise KillServerError(f"the kill server answered {reply!r} to opening a factory")
            self._open = True
        except BaseException:
            self._server = None
            _release(server, self._private)
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        server, self._server = self._server, None
        if server is None:
            return
        try:
            if self._open and server.usable():
                self._open = False
                server.send({"close": True})
                server.reply(_START_TIMEOUT_S)
        except KillServerError:
            pass
        finally:
            _release(server, self._private)

    def stderr_tail(self, limit: int = 2000) -> str:
        """The end of what the factory process and its writers wrote to stderr."""
        if self._server is None:
            return ""
        return self._server.stderr_tail(self._stderr_from, limit)

    def trial(
        self,
        path: str,
        *,
        first: int,
        delay_s: float | None,
        timeout_s: float,
        timer_s: float | None = None,
    ) -> KillOutcome:
        """Fork a writer saving checkpoint ``first`` then the other, alternately, over ``path``
        and kill it after ``delay_s`` seconds of saving, or (``None``) when ``path`` changes
        (at the latest after ``timeout_s``); with ``timer_s`` the writer also ends itself
        ``timer_s`` after its first in-place change of ``path`` (see :func:`_writer`)."""
        server = self._server
        if server is None or not self._open:
            raise KillServerError("the kill server's factory process is not running")
        server.send(
            {
                "path": path,
                "first": first,
                "delay": delay_s,
                "timeout": timeout_s,
                "timer": timer_s,
            }
        )
        reply = server.reply(timeout_s * 2 + 60.0)
        if "closed" in reply:
            self._open = False
            raise KillServerError(
                f"the kill server's factory process exited (wait status {reply.get('status')}): "
                f"{self.stderr_tail()}"
            )
        saves = reply.get("saves")
        return KillOutcome(
            started=reply.get("started") is True,
            killed=reply.get("killed") is True,
            changed=reply.get("changed") is True,
            saves=saves if isinstance(saves, int) else 0,
            error=str(reply.get("error", "")),
        )

    def interrupt(
        self, path: str, *, operation: str, at: int | None, timeout_s: float, package: str = ""
    ) -> InterruptOutcome:
        """Fork a child that saves checkpoint A over ``path``, then saves B (``operation``
        ``"save"``) or loads (``"load"``) with a ``KeyboardInterrupt`` raised at its ``at``-th
        interrupt point (``None``: none, to count the points and list those in modules of the
        top-level package ``package``); killed after ``timeout_s``."""
        server = self._server
        if server is None or not self._open:
            raise KillServerError("the kill server's factory process is not running")
        server.send(
            {
                "interrupt": {
                    "path": path,
                    "operation": operation,
                    "at": at,
                    "timeout": timeout_s,
                    "package": package,
                }
            }
        )
        reply = server.reply(timeout_s + 60.0)
        if "closed" in reply:
            self._open = False
            raise KillServerError(
                f"the kill server's factory process exited (wait status {reply.get('status')}): "
                f"{self.stderr_tail()}"
            )
        points, own, point = reply.get("points"), reply.get("own"), reply.get("point")
        importing = reply.get("importing")
        return InterruptOutcome(
            started=reply.get("started") is True,
            ended=str(reply.get("ended", "")),
            fired=reply.get("fired") is True,
            points=points if isinstance(points, int) else 0,
            where=str(reply.get("where", "")),
            module=str(reply.get("module", "")),
            error=str(reply.get("error", "")),
            survived=reply.get("survived") is True,
            torn_down=reply.get("torn_down") is True,
            status=str(reply.get("status", "")),
            carried=reply.get("carried") is True,
            own=tuple(int(p) for p in own) if isinstance(own, list) else (),
            importing=tuple(int(p) for p in importing) if isinstance(importing, list) else (),
            point=(
                {str(k): v for k, v in point.items() if isinstance(v, (str, int))}
                if isinstance(point, dict)
                else {}
            ),
        )


# --------------------------------------------------------------------------- the server side


def _signature(path: str) -> object:
    """What identifies the state of ``path``: its lstat, and its entries' for a directory."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    own = (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_mode)
    if not os.path.isdir(path):
        return own
    entries = []
    for root, dirs, files in os.walk(path):
        for name in sorted(dirs + files):
            try:
                sub = os.lstat(os.path.join(root, name))
            except FileNotFoundError:
                continue
            entries.append((root, name, sub.st_ino, sub.st_size, sub.st_mtime_ns))
    return own, tuple(entries)


def _writer(
    factory: Callable[[], object],
    path: str,
    contents: tuple[dict[str, object], ...],
    first: int,
    progress: int,
    errors: int,
    timer_s: float | None,
) -> None:
    """The forked writer: save contents[first], the other, ... until killed. Never returns.

    With ``timer_s``, the first Python-level operation that changes ``path`` in place (opening
    it for writing, truncating or removing it: an audit event, raised just before the
    operation) starts a timer whose SIGALRM, left at its default action, ends the process
    ``timer_s`` later wherever it is, even inside one long system call (a file copy): a kill
    at a point of the save that another process's polling could miss."""
    code = 1
    try:
        from trainspec.checkpoint_io import AsyncCheckpointIO

        io = factory()
        if timer_s is not None:
            _arm_on_change(path, timer_s)
        os.write(progress, b"s")
        index = first
        while True:
            io.save_checkpoint(contents[index % 2], path)  # type: ignore[attr-defined]
            if isinstance(io, AsyncCheckpointIO):
                io.wait()
            index += 1
            os.write(progress, b"d")
    except BaseException as exc:  # the parent reports it: the writer exited by itself
        with _suppress():
            os.write(errors, repr(exc)[:2000].encode(errors="replace"))
    finally:
        os._exit(code)


_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_TRUNC | os.O_APPEND


def _arm_on_change(path: str, timer_s: float) -> None:
    """Install the audit hook of :func:`_writer` (see there)."""
    target = os.path.abspath(path)
    signal.signal(signal.SIGALRM, signal.SIG_DFL)
    armed: list[bool] = []

    def touches(candidate: object) -> bool:
        if isinstance(candidate, int) or candidate is None:
            return False
        try:
            name = os.path.abspath(os.fsdecode(candidate))  # type: ignore[arg-type]
        except (TypeError, ValueError):
            return False
        return name == target or name.startswith(target + os.sep)

    def hook(event: str, args: tuple[object, ...]) -> None:
        if armed or not args:
            return
        if event == "open":
            mode, flags = (*args, None, None)[1:3]
            writing = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
                isinstance(flags, int) and bool(flags & _WRITE_FLAGS)
            )
            hit = writing and touches(args[0])
        else:
            hit = event in ("os.remove", "os.truncate", "os.rmdir") and touches(args[0])
        if hit:
            armed.append(True)
            signal.setitimer(signal.ITIMER_REAL, timer_s)

    sys.addaudithook(hook)


class _suppress:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> bool:
        return True


def _drain(fd: int) -> bytes:
    data = b""
    while True:
        try:
            chunk = os.read(fd, 65536)
        except BlockingIOError:
            break
        if not chunk:
            break
        data += chunk
    return data


def _one_trial(
    factory: Callable[[], object],
    contents: tuple[dict[str, object], ...],
    request: dict[str, object],
) -> dict[str, object]:
    path = str(request["path"])
    first = int(request["first"])  # type: ignore[call-overload]
    delay = request["delay"]
    timeout = float(request["timeout"])  # type: ignore[arg-type]
    baseline = _signature(path)
    progress_r, progress_w = os.pipe()
    errors_r, errors_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the writer
        os.close(progress_r)
        os.close(errors_r)
        timer = request.get("timer")
        _writer(
            factory,
            path,
            contents,
            first,
            progress_w,
            errors_w,
            float(timer) if isinstance(timer, (int, float)) else None,
        )
    os.close(progress_w)
    os.close(errors_w)
    os.set_blocking(progress_r, False)
    started = changed = False
    reaped: int | None = None
    seen = b""
    deadline = time.monotonic() + timeout
    # Wait for the writer to begin saving (its factory may take a moment).
    while not started and time.monotonic() < deadline:
        ready, _, _ = select.select([progress_r], [], [], max(0.0, deadline - time.monotonic()))
        if not ready:
            break
        chunk = _drain(progress_r)
        seen += chunk
        started = b"s" in seen
        if not chunk and not started:
            break  # the writer exited before starting
    if started:
        if delay is None:
            checks = 0
            while time.monotonic() < deadline:
                if _signature(path) != baseline:
                    changed = True
                    break
                checks += 1
                if checks % 256 == 0:
                    done, status = os.waitpid(pid, os.WNOHANG)
                    if done:
                        reaped = status
                        break
        else:
            time.sleep(float(delay))  # type: ignore[arg-type]
    if reaped is None:
        os.kill(pid, signal.SIGKILL)  # a writer that exited is a zombie until reaped: no error
        _, status = os.waitpid(pid, 0)
    else:  # it exited by itself during the change poll
        status = reaped
    # SIGALRM: the writer's own change timer (its default action ends the process as abruptly).
    killed = os.WIFSIGNALED(status) and os.WTERMSIG(status) in (signal.SIGKILL, signal.SIGALRM)
    seen += _drain(progress_r)
    os.set_blocking(errors_r, False)
    error = _drain(errors_r).decode(errors="replace")
    os.close(progress_r)
    os.close(errors_r)
    if not killed and not error:
        error = f"the writer exited by itself (wait status {status})"
    return {
        "started": b"s" in seen,
        "killed": killed,
        "changed": changed,
        "saves": seen.count(b"d"),
        "error": error,
    }


_POINT_EVENTS: Final = ("call", "c_return")


class _InterruptAt:
    """A profile function: counts interrupt points, raises KeyboardInterrupt at the ``at``-th."""

    def __init__(
        self,
        at: int | None,
        fired: Callable[[dict[str, object]], None] = lambda point: None,
        package: str = "",
    ) -> None:
        self.at = at
        self.count = 0
        self.where = ""
        self.module = ""
        self.point: dict[str, object] = {}
        """Where the interrupt was raised: event, function, file, line, called, module."""
        self.raised: KeyboardInterrupt | None = None
        """The interrupt raised (to tell, later, whether an exception carries it)."""
        self.own: list[int] = []
        """The points in modules of ``package`` (recorded only when ``at`` is None)."""
        self.importing: list[int] = []
        """The points inside an import (recorded only when ``at`` is None): an interrupt there
        leaves a half-imported module, and CPython itself may wrap it (``__set_name__``)."""
        self._fired = fired
        self._package = package

    def __call__(self, frame: FrameType, event: str, arg: object) -> None:
        if event not in _POINT_EVENTS:
            return
        self.count += 1
        if self.at is None:
            name = str(frame.f_globals.get("__name__", ""))
            if self._package and name.split(".", 1)[0] == self._package:
                self.own.append(self.count)
            if _in_import(frame):
                self.importing.append(self.count)
        if self.count == self.at:
            code = frame.f_code
            self.module = str(frame.f_globals.get("__name__", ""))
            called = getattr(arg, "__qualname__", "") if event == "c_return" else ""
            after = f" after calling {called}" if called else ""
            self.where = (
                f"{self.module} {code.co_name}{after} "
                f"({os.path.basename(code.co_filename)}:{frame.f_lineno})"
            )
            self.point = {
                "event": event,
                "function": code.co_name,
                "file": os.path.basename(code.co_filename),
                "line": frame.f_lineno,
                "called": called,
                "module": self.module,
            }
            self._fired(self.point)  # told now: the process may not live to tell
            self.raised = KeyboardInterrupt()
            raise self.raised


def _in_import(frame: FrameType | None) -> bool:
    """Whether ``frame`` runs inside an import (importlib's frames are on the stack)."""
    while frame is not None:
        if frame.f_code.co_filename.startswith("<frozen importlib"):
            return True
        frame = frame.f_back
    return False


def _carries(exc: BaseException, target: BaseException | None, depth: int = 0) -> bool:
    """Whether ``target`` is ``exc`` or reachable from it: its cause and context, and
    exceptions it holds in its arguments or attributes (an exception group's members, DCP's
    per-rank failures), a few levels deep."""
    if target is None or depth > 6:
        return False
    if exc is target:
        return True
    held = [exc.__cause__, exc.__context__, *exc.args, *getattr(exc, "__dict__", {}).values()]
    return any(_carries(inner, target, depth + 1) for inner in _exceptions_in(held, 3))


def _exceptions_in(value: object, depth: int) -> Iterator[BaseException]:
    """The exceptions in ``value``: itself, or inside lists, tuples and dict values."""
    if isinstance(value, BaseException):
        yield value
    elif depth > 0 and isinstance(value, (list, tuple)):
        for item in value:
            yield from _exceptions_in(item, depth - 1)
    elif depth > 0 and isinstance(value, dict):
        for item in value.values():
            yield from _exceptions_in(item, depth - 1)


def _chain(exc: BaseException) -> str:
    """``exc`` and its cause/context chain, for a report."""
    parts: list[str] = []
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen and len(parts) < 4:
        seen.add(id(current))
        parts.append(f"{type(current).__module__}.{type(current).__qualname__}: {current}"[:300])
        current = current.__cause__ or current.__context__
    return " <- ".join(parts)


def _interrupt_child(
    factory: Callable[[], object],
    contents: tuple[dict[str, object], ...],
    request: dict[str, object],
    report: int,
) -> None:
    """The forked child of an interrupt trial (see the module's docstring). Never returns.

    Writes JSON lines to ``report``: one when the instance is built and A saved, one when the
    call ended, one after the garbage collection, one after ``teardown``."""

    def tell(message: dict[str, object]) -> None:
        os.write(report, (json.dumps(message) + "\n").encode())

    try:
        from trainspec.checkpoint_io import AsyncCheckpointIO

        path = str(request["path"])
        io: Any = factory()

        def settle() -> None:
            if isinstance(io, AsyncCheckpointIO):
                io.wait()

        io.save_checkpoint(contents[0], path)
        settle()
        if request["operation"] == "load":

            def call() -> None:
                io.load_checkpoint(path)
        else:

            def call() -> None:
                io.save_checkpoint(contents[1], path)
                settle()

        tell({"started": True})
    except BaseException as exc:
        with _suppress():
            tell({"started": False, "error": _chain(exc)})
        os._exit(1)
    at = request["at"]
    profile = _InterruptAt(
        at if isinstance(at, int) else None,
        lambda point: tell(
            {"fired": True, "where": profile.where, "module": profile.module, "point": point}
        ),
        str(request.get("package", "")),
    )
    ended, error, carried = "returned", "", False
    sys.setprofile(profile)
    try:
        call()
    except KeyboardInterrupt:
        ended = "interrupted"
    except BaseException as exc:
        ended, error, carried = "raised", _chain(exc), _carries(exc, profile.raised)
    finally:
        sys.setprofile(None)
        # Drop the interrupt: its traceback keeps what the call left unfinished alive, and
        # the collection below must see what freeing it does (as a real program would).
        profile.raised = None
    with _suppress():
        tell(
            {
                "ended": ended,
                "error": error,
                "carried": carried,
                "fired": bool(profile.where),
                "points": profile.count,
                "where": profile.where,
                "module": profile.module,
                "own": profile.own,
                "importing": profile.importing,
            }
        )
        gc.collect()  # an unfinished writer's destructor runs now (and may abort the process)
        tell({"survived": True})
        teardown = getattr(io, "teardown", None)
        if callable(teardown):
            with _suppress():
                teardown()
        tell({"torn_down": True})
    os._exit(0)


def _interrupt_trial(
    factory: Callable[[], object],
    contents: tuple[dict[str, object], ...],
    request: dict[str, object],
) -> dict[str, object]:
    timeout = float(request["timeout"])  # type: ignore[arg-type]
    report_r, report_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child
        os.close(report_r)
        try:
            _interrupt_child(factory, contents, request, report_w)
        finally:
            os._exit(1)
    os.close(report_w)
    answer: dict[str, object] = {}
    buffer = b""
    deadline = time.monotonic() + timeout
    status: int | None = None
    while True:
        left = deadline - time.monotonic()
        ready, _, _ = select.select([report_r], [], [], max(0.0, left))
        if not ready:
            break  # the timeout: the child is killed below
        chunk = os.read(report_r, 65536)
        if not chunk:
            break  # the child exited (or closed its end)
        buffer += chunk
    os.close(report_r)
    for line in buffer.decode(errors="replace").splitlines():
        with _suppress():
            answer.update(json.loads(line))
    # The end of the report comes as the child exits, a moment before it can be reaped.
    while status is None:
        done, waited = os.waitpid(pid, os.WNOHANG)
        if done:
            status = waited
        elif time.monotonic() >= deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            answer["status"] = f"killed after {timeout:.0f} s"
            break
        else:
            time.sleep(0.001)
    if status is not None and os.WIFSIGNALED(status):
        answer["status"] = f"killed by {signal.Signals(os.WTERMSIG(status)).name}"
    elif status is not None and os.WEXITSTATUS(status) != 0:
        answer["status"] = f"exit status {os.WEXITSTATUS(status)}"
    return answer


class _Lines:
    """Lines read from a file descriptor with no read-ahead beyond what arrived: a process
    forked between two requests starts with nothing buffered (the protocol sends one request
    and waits for its answer)."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._buffer = b""

    def next(self) -> bytes | None:
        """The next non-empty line, or None at the end of the input."""
        while True:
            while b"\n" in self._buffer:
                line, self._buffer = self._buffer.split(b"\n", 1)
                if line.strip():
                    return line
            chunk = os.read(self._fd, 65536)
            if not chunk:
                return None
            self._buffer += chunk


def _serve_factory(
    opened: dict[str, object], lines: _Lines, answer: Callable[[dict[str, object]], None]
) -> int:
    """The factory process: import the factory, then run trials until told to close."""
    try:
        import importlib

        import torch

        sys.path[:] = [str(p) for p in opened["sys_path"]]  # type: ignore[attr-defined]
        importlib.invalidate_caches()
        os.chdir(str(opened["cwd"]))
        os.environ.clear()
        os.environ.update({str(k): str(v) for k, v in opened["env"].items()})  # type: ignore[attr-defined]
        module, qualname = str(opened["module"]), str(opened["qualname"])
        factory: object = importlib.import_module(module)
        for part in qualname.split("."):
            factory = getattr(factory, part)
        if not callable(factory):
            raise TypeError(f"{module}:{qualname} is not callable")
        contents = kill_checkpoints(
            int(opened["numel"]),  # type: ignore[call-overload]
            getattr(torch, str(opened["dtype"])),
        )
    except BaseException as exc:  # reported to the parent, which skips or fails
        answer({"fatal": f"importing the factory in a fresh process failed: {exc!r}"})
        return 1
    gc.freeze()  # forked children collect only what they make (a full collection is slow)
    answer({"ready": True})
    while True:
        line = lines.next()
        if line is None:
            return 0
        request = json.loads(line)
        if request.get("close"):
            return 0
        interrupt = request.get("interrupt")
        if isinstance(interrupt, dict):
            answer(_interrupt_trial(factory, contents, interrupt))
        else:
            answer(_one_trial(factory, contents, request))


def _serve() -> int:
    os.environ.pop(_ENV, None)
    reply = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # anything the plugin prints goes to stderr, never into the protocol

    def answer(message: dict[str, object]) -> None:
        reply.write(_REPLY + json.dumps(message) + "\n")

    try:
        import torch

        torch.set_num_threads(1)  # no intra-op pool: forked writers must not wait on lost threads
    except BaseException as exc:  # reported to the parent, which skips
        answer({"fatal": f"importing torch in a fresh process failed: {exc!r}"})
        return 1
    answer({"ready": True})
    lines = _Lines(0)
    while True:
        line = lines.next()
        if line is None:
            return 0
        request = json.loads(line)
        opened = request.get("open")
        if not isinstance(opened, dict):
            answer({"closed": True, "status": None})  # a trial with no factory process
            continue
        pid = os.fork()
        if pid == 0:  # the factory process: it answers until closed, then exits
            code = 1
            try:
                code = _serve_factory(opened, lines, answer)
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        answer({"closed": True, "status": status})


if __name__ == "__main__":
    sys.exit(_serve())
