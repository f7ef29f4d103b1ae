"""Kill the ranks of a sharded save with SIGKILL at chosen points, in a small world of child
processes (DCKPT-2).

The harness's persistent world must not lose a rank, so the kill check runs its trials in a
world of its own: :class:`KillWorld` starts one fresh Python *server* (on the check's rank 0)
that imports torch and the target's factory once, single-threaded, with ``WORLD_SIZE``,
``LOCAL_WORLD_SIZE``, ``NODE_RANK`` and ``MASTER_ADDR`` set. For every trial it forks one
*writer* per rank that takes its ``RANK`` and ``LOCAL_RANK`` and a fresh ``MASTER_PORT``, builds a
strategy with the factory, calls ``setup_environment()`` and saves the recognisable checkpoints
of :func:`kill_whole` (step ``base``, ``base + 1``, ...) through the strategy's
``checkpoint_io`` until the check kills one rank (the victim) with SIGKILL, after a delay or the
moment the path changes, and the others a moment later. The check then loads the path.

A victim of a change-triggered trial also arms the timer of
:func:`trainspec.conformance._checkpoint_kill` at its first in-place change of the path, so a
write into the committed checkpoint dies there even when the check's polling is descheduled.

Run as a script (``python _sharded_kill.py``) it is a server: it takes the parent's ``sys.path``
and reads one JSON request per line; it answers with lines starting with
``@@trainspec-dkill``. Writers die with the server (``PR_SET_PDEATHSIG`` on Linux) and the
server with its parent (the same, and a ``getppid()`` poll). POSIX only (fork, SIGKILL).
Nothing here is public API.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, Final, cast

from typing_extensions import Self

if TYPE_CHECKING:
    from collections.abc import Callable

    import torch
    from torch.distributed.device_mesh import DeviceMesh

__all__ = ["KillWorld", "KillWorldError", "TrialOutcome", "kill_part", "kill_whole"]

_REPLY: Final = "@@trainspec-dkill "
_ENV: Final = "TRAINSPEC_DKILL_SERVER"
_START_TIMEOUT_S: Final = 120.0
_PR_SET_PDEATHSIG: Final = 1
_BOOT: Final = (
    "import json, os, runpy, sys; "
    f"sys.path[:] = json.loads(os.environ[{_ENV!r}])['sys_path']; "
    "runpy.run_path(sys.argv[1], run_name='__main__')"
)
_BIG: Final = (256, 512)
_UNEVEN: Final = (5, 3)


def _readable(fds: list[int], timeout_s: float) -> list[int]:
    """The descriptors of ``fds`` that are readable (or closed) within ``timeout_s``.

    ``poll``, not ``select``: the kit's process may hold more than ``FD_SETSIZE`` (1024) files,
    and ``select`` refuses a descriptor above that.
    """
    poller = select.poll()
    for fd in fds:
        poller.register(fd, select.POLLIN | select.POLLHUP | select.POLLERR)
    return [fd for fd, _ in poller.poll(max(timeout_s, 0.0) * 1000)]


def kill_whole(step: int) -> dict[str, object]:
    """The complete checkpoint of save ``step``: every tensor element is ``step``, so a load that
    mixes two saves (or a part from another save) differs from every complete one."""
    import torch

    return {
        "step": step,
        "tensors": {
            "big": torch.full(_BIG, float(step)),
            "uneven": torch.full(_UNEVEN, step, dtype=torch.int64),
        },
        "extra": [step, "kill", None],
    }


def kill_part(device: torch.device, mesh: DeviceMesh, step: int) -> dict[str, object]:
    """This rank's part of :func:`kill_whole`: its tensors sharded along dimension 0 over
    ``mesh`` (a collective: every rank calls it)."""
    from torch.distributed.tensor import Shard, distribute_tensor

    whole = kill_whole(step)
    tensors = whole["tensors"]
    assert isinstance(tensors, dict)
    return {
        **whole,
        "tensors": {
            key: distribute_tensor(value.to(device), mesh, [Shard(0)])
            for key, value in tensors.items()
        },
    }


@dataclass(frozen=True)
class TrialOutcome:
    """What happened to the writers of one trial."""

    started: bool
    """Every writer built its strategy, set up its environment and began saving."""
    error: str
    """Why not, or what a writer that exited by itself before the kill reported."""
    saves: tuple[int, ...]
    """Saves each rank's writer completed (returned from) before it died."""
    when: str
    """When the victim was killed, in words."""


class KillWorldError(RuntimeError):
    """A server could not start (its factory does not import in a fresh process) or stopped
    answering."""


class KillWorld:
    """A server process that forks a world of killable writers for one strategy factory (a
    context manager). Start it early: the server imports torch while the caller works."""

    def __init__(
        self, module: str, qualname: str, *, world_size: int, main_address: str = "127.0.0.1"
    ) -> None:
        self._world_size = world_size
        self._main_address = main_address
        self._env = dict(os.environ)
        self._env.update(
            {
                "WORLD_SIZE": str(world_size),
                "LOCAL_WORLD_SIZE": str(world_size),
                "NODE_RANK": "0",
                "MASTER_ADDR": main_address,
                "OMP_NUM_THREADS": "1",
                _ENV: json.dumps(
                    {
                        "module": module,
                        "qualname": qualname,
                        "sys_path": [p or os.getcwd() for p in sys.path],
                    }
                ),
            }
        )
        self._process: subprocess.Popen[bytes] | None = None
        self._stderr: IO[bytes] | None = None
        self._buffer = b""
        self._ready = False

    def __enter__(self) -> Self:
        self._stderr = tempfile.TemporaryFile()
        self._process = subprocess.Popen(
            [sys.executable, "-u", "-c", _BOOT, os.path.abspath(__file__)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            env=self._env,
        )
        return self

    def __exit__(self, *exc: object) -> None:
        process = self._process
        if process is not None:
            if process.poll() is None:
                process.kill()  # its writers die with it (PR_SET_PDEATHSIG)
            process.wait()
            for stream in (process.stdin, process.stdout):
                if stream is not None:
                    stream.close()
        if self._stderr is not None:
            self._stderr.close()

    def wait_ready(self) -> None:
        """Wait until the server imported the factory; :class:`KillWorldError` if it could
        not."""
        if not self._ready:
            self._reply(_START_TIMEOUT_S)
            self._ready = True

    def trial(
        self,
        path: str,
        *,
        base: int,
        victim: int,
        delay_s: float | None,
        timer_s: float | None,
        timeout_s: float,
        start_timeout_s: float = 60.0,
        grace_s: float = 0.1,
    ) -> TrialOutcome:
        """Let every rank's writer save steps ``base``, ``base + 1``, ... over ``path``; kill
        rank ``victim``'s writer ``delay_s`` seconds after all began, or (``None``) when
        ``path`` changes (at the latest after ``timeout_s``), the others ``grace_s`` later."""
        from trainspec.conformance._checkpoint_kill import _signature
        from trainspec.conformance.fakes import free_port

        self.wait_ready()
        baseline = _signature(path)
        self._send(
            {
                "op": "start",
                "path": path,
                "port": free_port(self._main_address),
                "base": base,
                "victim": victim,
                "timer": timer_s,
                "world_size": self._world_size,
                "start_timeout": start_timeout_s,
            }
        )
        start = self._reply(start_timeout_s + 30.0)
        pids = [int(pid) for pid in cast("list[int]", start["pids"])]
        starts = cast("list[str | None]", start["errors"])
        started = all(error is None for error in starts)
        when = ""
        if started:
            if delay_s is None:
                deadline = time.monotonic() + timeout_s
                when = f"no change of the path within {timeout_s:.0f}s"
                while time.monotonic() < deadline:
                    if _signature(path) != baseline:
                        when = "the moment the path changed"
                        break
                    time.sleep(0.001)
            else:
                time.sleep(delay_s)
                when = f"{delay_s:.3f}s into saving"
        order = [victim] + [rank for rank in range(len(pids)) if rank != victim]
        for index, rank in enumerate(order):
            if index == 1:
                time.sleep(grace_s)  # what the survivors do when a peer dies shows too
            os.kill(pids[rank], signal.SIGKILL)  # unreaped by the server: still this pid
        self._send({"op": "reap"})
        reaped = self._reply(60.0)
        saves = tuple(int(n) for n in cast("list[int]", reaped["saves"]))
        errors = cast("list[str]", reaped["errors"])
        if not started:
            detail = "; ".join(
                f"rank {rank}: {error}" for rank, error in enumerate(starts) if error is not None
            )
            return TrialOutcome(False, detail, saves, when)
        error = ""
        if cast("list[bool]", reaped["killed"])[victim] is not True:
            error = "; ".join(f"rank {rank}: {e}" for rank, e in enumerate(errors) if e)
        return TrialOutcome(True, error, saves, when)

    def _send(self, request: dict[str, object]) -> None:
        process = self._process
        assert process is not None and process.stdin is not None
        try:
            process.stdin.write((json.dumps(request) + "\n").encode())
            process.stdin.flush()
        except OSError as error:
            raise KillWorldError(f"the kill server is gone: {error!r}") from error

    def _reply(self, timeout_s: float) -> dict[str, object]:
        process = self._process
        assert process is not None and process.stdout is not None
        fd = process.stdout.fileno()
        deadline = time.monotonic() + timeout_s
        while True:
            while b"\n" in self._buffer:
                line, self._buffer = self._buffer.split(b"\n", 1)
                text = line.decode(errors="replace")
                if text.startswith(_REPLY):
                    answer: dict[str, object] = json.loads(text[len(_REPLY) :])
                    if "fatal" in answer:
                        raise KillWorldError(str(answer["fatal"]))
                    return answer
            left = deadline - time.monotonic()
            if left <= 0:
                raise KillWorldError(f"the kill server did not answer within {timeout_s:.0f}s")
            ready = _readable([fd], left)
            if ready:
                chunk = os.read(fd, 65536)
                if not chunk:
                    raise KillWorldError(
                        f"the kill server exited (code {process.wait()}): {self._tail()}"
                    )
                self._buffer += chunk

    def _tail(self, limit: int = 1500) -> str:
        if self._stderr is None:
            return ""
        self._stderr.seek(0)
        return self._stderr.read().decode(errors="replace")[-limit:]


# --------------------------------------------------------------------------- the server side


def _die_with_parent() -> None:
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        except (OSError, AttributeError):
            pass


def _writer(
    factory: Callable[[], object],
    request: dict[str, object],
    parent: int,
    progress: int,
    errors: int,
) -> None:
    """The forked writer of one rank: save until killed. Never returns."""
    try:
        _die_with_parent()
        if os.getppid() != parent:
            os._exit(1)
        from torch.distributed.device_mesh import init_device_mesh

        from trainspec.conformance._checkpoint_kill import _arm_on_change

        path = str(request["path"])
        os.environ["MASTER_PORT"] = str(request["port"])
        strategy = factory()
        strategy.setup_environment()  # type: ignore[attr-defined]
        io = strategy.checkpoint_io  # type: ignore[attr-defined]
        device: torch.device = strategy.root_device  # type: ignore[attr-defined]
        mesh = init_device_mesh(device.type, (int(os.environ["WORLD_SIZE"]),))
        step = int(str(request["base"]))
        part = kill_part(device, mesh, step)
        timer = request.get("timer")
        if isinstance(timer, (int, float)):
            _arm_on_change(path, float(timer))
        os.write(progress, b"s")
        while True:
            io.save_checkpoint(part, path)
            os.write(progress, b"d")
            step += 1
            part = kill_part(device, mesh, step)
    except BaseException as exc:  # reported to the check: the writer exited by itself
        try:
            os.write(errors, repr(exc)[:2000].encode(errors="replace"))
        except OSError:
            pass
    finally:
        os._exit(1)


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


class _Writer:
    def __init__(self, pid: int, progress: int, errors: int) -> None:
        self.pid, self.progress, self.errors = pid, progress, errors
        self.seen = b""


def _fork_writer(factory: Callable[[], object], request: dict[str, object], rank: int) -> _Writer:
    progress_r, progress_w = os.pipe()
    errors_r, errors_w = os.pipe()
    parent = os.getpid()
    pid = os.fork()
    if pid == 0:
        os.close(progress_r)
        os.close(errors_r)
        os.environ["RANK"] = os.environ["LOCAL_RANK"] = str(rank)
        mine = dict(request)
        if rank != request.get("victim"):
            mine["timer"] = None
        _writer(factory, mine, parent, progress_w, errors_w)
    os.close(progress_w)
    os.close(errors_w)
    os.set_blocking(progress_r, False)
    os.set_blocking(errors_r, False)
    return _Writer(pid, progress_r, errors_r)


def _start(
    factory: Callable[[], object], request: dict[str, object]
) -> tuple[list[_Writer], dict[str, object]]:
    """Fork one writer per rank; answer when every one began saving (or did not in time)."""
    world = int(str(request["world_size"]))
    timeout_s = float(str(request.get("start_timeout", 60.0)))
    writers = [_fork_writer(factory, request, rank) for rank in range(world)]
    deadline = time.monotonic() + timeout_s
    waiting = {writer.progress: writer for writer in writers}
    while waiting:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        ready = _readable(list(waiting), left)
        if not ready:
            break
        for fd in ready:
            writer = waiting[fd]
            chunk = _drain(fd)
            writer.seen += chunk
            if b"s" in writer.seen or not chunk:  # began, or exited before it began
                del waiting[fd]
    errors: list[str | None] = []
    for writer in writers:
        if b"s" in writer.seen:
            errors.append(None)
        else:
            error = _drain(writer.errors).decode(errors="replace")
            errors.append(error or f"it did not begin saving within {timeout_s:.0f}s")
    return writers, {"pids": [writer.pid for writer in writers], "errors": errors}


def _reap(writers: list[_Writer]) -> dict[str, object]:
    killed, saves, errors = [], [], []
    for writer in writers:
        _, status = os.waitpid(writer.pid, 0)
        writer.seen += _drain(writer.progress)
        error = _drain(writer.errors).decode(errors="replace")
        os.close(writer.progress)
        os.close(writer.errors)
        signalled = os.WIFSIGNALED(status) and os.WTERMSIG(status) in (
            signal.SIGKILL,
            signal.SIGALRM,
        )
        if not signalled and not error:
            error = f"the writer exited by itself (wait status {status})"
        killed.append(signalled)
        saves.append(writer.seen.count(b"d"))
        errors.append(error)
    return {"killed": killed, "saves": saves, "errors": errors}


def _serve() -> int:
    args = json.loads(os.environ.pop(_ENV))
    parent = os.getppid()
    _die_with_parent()
    reply = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # anything the plugin prints goes to stderr, never into the protocol

    def answer(message: dict[str, object]) -> None:
        reply.write(_REPLY + json.dumps(message) + "\n")

    try:
        import importlib

        import torch

        # What every writer uses, imported once here rather than in each (DTensor's first use
        # imports torch._dynamo: a second).
        import torch._dynamo
        import torch.distributed.device_mesh
        import torch.distributed.tensor

        import trainspec.conformance._checkpoint_kill  # noqa: F401

        torch.set_num_threads(1)  # no intra-op pool: forked writers must not wait on lost threads
        factory: object = importlib.import_module(args["module"])
        for part in args["qualname"].split("."):
            factory = getattr(factory, part)
        if not callable(factory):
            raise TypeError(f"{args['module']}:{args['qualname']} is not callable")
    except BaseException as exc:  # reported to the check, which skips
        answer({"fatal": f"importing the factory in a fresh process failed: {exc!r}"})
        return 1
    answer({"ready": True})
    writers: list[_Writer] = []
    buffer = b""
    try:
        while os.getppid() == parent:
            ready = _readable([0], 1.0)
            if not ready:
                continue
            chunk = os.read(0, 65536)
            if not chunk:
                break
            buffer += chunk
            while b"\n" in buffer:
                line, buffer = buffer.split(b"\n", 1)
                request = json.loads(line)
                if request["op"] == "start":
                    writers, started = _start(factory, request)
                    answer(started)
                else:  # "reap": the parent killed them
                    answer(_reap(writers))
                    writers = []
    finally:
        for writer in writers:
            os.kill(writer.pid, signal.SIGKILL)
    return 0


if __name__ == "__main__":
    sys.exit(_serve())
