#!/usr/bin/env python
"""Ctrl-C at every point where CPython can deliver it, during a save or a load (CKPT-3).

A random signal (``scripts/soak_checkpoint_crash.py``) rarely lands in the few places where
an interrupt goes wrong; this script tries each of them in turn. CPython runs a Python
signal handler -- and so raises ``KeyboardInterrupt`` -- only at certain points of the
main thread: on entry to a Python function, and right after a call into C returns (3.11;
loop back-edges too, which this model leaves out). ``sys.setprofile`` reports exactly
those two events ("call" and "c_return"), so the script counts them for one operation and
then, for each k, repeats the operation with a profile function that raises
``KeyboardInterrupt`` at the k-th. Each attempt runs in a forked child (torch imported
once), so a crash is observed rather than suffered.

For every point the outcome must be one of:

- the operation raised ``KeyboardInterrupt`` itself (not wrapped, not translated);
- the operation finished normally because the k-th point was never reached this time.

and afterwards (garbage collected, so late destructors run):

- the process is alive (an unfinished ``torch.save`` writer whose destructor writes into a
  closed file aborts the process from C++);
- the path loads as the old or the new checkpoint, whole;
- no temporary file is left, and the next save and load work (for a background IO:
  ``teardown`` returns within a few seconds).

An interrupt that fires but does not come out of the operation was swallowed: a finalizer
that ran Python code, or a ``RuntimeError`` wrapper that was caught. That is a failure.

Scenarios: ``torch``, ``safetensors`` and ``memory`` (save), ``background`` (save then
``wait``, with BackgroundCheckpointIO(TorchCheckpointIO())), ``torch-load``,
``safetensors-load`` and ``memory-load``. Fault
scenarios, not run by default, prove the harness can fail: ``fault-finalizer`` (the
interrupt is lost in a writer's finalizer) and ``fault-destructor`` (an interrupted
``torch.save`` into a file closed before its writer is destroyed).

Usage::

    python scripts/interrupt_every_point.py                    # all scenarios, a table
    python scripts/interrupt_every_point.py --json --scenarios torch,background

Exit status 0 when every point passed, 1 otherwise. POSIX only (fork). The model of where
signals are handled is CPython 3.11's; other versions check at similar points.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import io as stdlib_io
import json
import os
import shutil
import signal
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable
    from types import FrameType

    from trainspec.types import Checkpoint

SCENARIOS = (
    "torch",
    "safetensors",
    "background",
    "memory",
    "torch-load",
    "safetensors-load",
    "memory-load",
)
FAULT_SCENARIOS = ("fault-finalizer", "fault-destructor")
POINT_EVENTS = ("call", "c_return")
TEARDOWN_WAIT_S = 10.0


@dataclass
class ScenarioResult:
    """What one scenario observed; ``failures`` lists every failed point."""

    scenario: str
    points: int = 0  # interrupt points counted in one undisturbed run of the operation
    interrupted: int = 0  # points where the operation raised KeyboardInterrupt
    not_reached: int = 0  # points the operation finished before reaching (timing differs)
    failures: list[str] = field(default_factory=list)
    wall_seconds: float = 0.0


class _Interrupt:
    """A profile function that counts interrupt points and raises at the ``at``-th."""

    def __init__(self, at: int | None) -> None:
        self.at = at
        self.count = 0
        self.fired_in = ""

    def __call__(self, frame: FrameType, event: str, arg: object) -> None:
        if event not in POINT_EVENTS:
            return
        self.count += 1
        if self.count == self.at:
            name = getattr(arg, "__qualname__", None) if event == "c_return" else None
            code = frame.f_code
            where = f"{code.co_filename.rsplit(os.sep, 1)[-1]}:{frame.f_lineno} {code.co_name}"
            self.fired_in = f"{event} {name or ''} in {where}".replace("  ", " ")
            raise KeyboardInterrupt


def _checkpoint(tag: str) -> Checkpoint:
    import torch

    value = 1.0 if tag == "A" else 2.0
    weights = torch.full((4096,), value)
    return {"tag": tag, "weights": weights, "head": weights[:16], "meta": {"lr": value}}


def _same(loaded: Checkpoint, want: Checkpoint) -> bool:
    import torch

    return (
        loaded.get("tag") == want["tag"]
        and torch.equal(loaded["weights"], want["weights"])
        and loaded["meta"] == want["meta"]
    )


class _PyFlushWriter(stdlib_io.RawIOBase):
    """What ``_TrackedWriter`` was: Python ``flush``, left to the garbage collector."""

    def __init__(self, raw: Any) -> None:
        super().__init__()
        self._raw = raw

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        return int(self._raw.write(data))

    def flush(self) -> None:
        self._raw.flush()


class _FaultFinalizerIO:
    """Fault: encodes through a wrapper it never closes (its finalizer runs ``flush``)."""

    def save_checkpoint(self, checkpoint: Checkpoint, path: str) -> None:
        self._save(checkpoint, path, _PyFlushWriter)

    def _save(self, checkpoint: Checkpoint, path: str, wrap: Any) -> None:
        import torch

        from trainspec.reference.checkpoint_io._errors import interruption

        raw = open(path + ".part", "wb")  # closed on every path below
        failure: BaseException | None = None
        try:
            torch.save(checkpoint, wrap(raw))
        except BaseException as exc:
            failure = interruption(exc) or exc
            raw.close()
            os.unlink(path + ".part")
        if failure is not None:
            raise failure
        raw.close()
        os.replace(path + ".part", path)

    def load_checkpoint(self, path: str) -> Checkpoint:
        import torch

        return dict(torch.load(path, weights_only=True))


class _FaultDestructorIO(_FaultFinalizerIO):
    """Fault: closes the file under an interrupted ``torch.save``'s unfinished writer."""

    def save_checkpoint(self, checkpoint: Checkpoint, path: str) -> None:
        self._save(checkpoint, path, _RaisingWhenClosed)


class _RaisingWhenClosed:
    """A plain file-like (no finalizer): raises ``ValueError`` once ``raw`` is closed."""

    def __init__(self, raw: Any) -> None:
        self._raw = raw

    def write(self, data: Any) -> int:
        return int(self._raw.write(data))

    def flush(self) -> None:
        self._raw.flush()


def _make(scenario: str) -> Any:
    from trainspec.reference.checkpoint_io import (
        BackgroundCheckpointIO,
        MemoryCheckpointIO,
        SafetensorsCheckpointIO,
        TorchCheckpointIO,
    )

    if scenario.startswith("safetensors"):
        return SafetensorsCheckpointIO()
    if scenario == "background":
        return BackgroundCheckpointIO(TorchCheckpointIO())
    if scenario.startswith("memory"):
        return MemoryCheckpointIO()
    if scenario == "fault-finalizer":
        return _FaultFinalizerIO()
    if scenario == "fault-destructor":
        return _FaultDestructorIO()
    return TorchCheckpointIO()


def _checkpoints(scenario: str) -> tuple[Checkpoint, Checkpoint]:
    old, new = _checkpoint("A"), _checkpoint("B")
    if scenario.startswith("safetensors"):  # tensors only
        return {"weights": old["weights"]}, {"weights": new["weights"]}
    return old, new


def _operation(scenario: str, io: Any, path: str) -> Callable[[], object]:
    _, new = _checkpoints(scenario)
    if scenario.endswith("-load"):
        return lambda: io.load_checkpoint(path)
    if scenario == "background":

        def save_and_wait() -> None:
            io.save_checkpoint(new, path)
            io.wait()

        return save_and_wait
    return lambda: io.save_checkpoint(new, path)


def _temps(directory: str) -> list[str]:
    return sorted(n for n in os.listdir(directory) if n != "checkpoint")


def _teardown_returns(io: Any) -> str | None:
    """None when ``io.teardown()`` returns (or raises) within TEARDOWN_WAIT_S, else why not."""
    import threading

    teardown = getattr(io, "teardown", None)
    if teardown is None:
        return None
    outcome: list[str] = []

    def run() -> None:
        try:
            teardown()
            outcome.append("ok")
        except BaseException as exc:  # a background error surfacing here is allowed
            outcome.append(type(exc).__name__)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(TEARDOWN_WAIT_S)
    return None if outcome else f"teardown did not return within {TEARDOWN_WAIT_S:.0f} s"


def _warm_up(scenario: str, directory: str) -> None:
    """Run the operation once in this (parent) process, so first-call work (imports,
    caches) is done before any child forks and is not counted as interrupt points."""
    path = os.path.join(directory, "warm-up")
    io = _make(scenario)
    old, _ = _checkpoints(scenario)
    io.save_checkpoint(old, path)
    _operation(scenario, io, path)()
    getattr(io, "teardown", lambda: None)()
    with contextlib.suppress(FileNotFoundError):  # a memory IO wrote no file
        os.unlink(path)


def _attempt(scenario: str, directory: str, at: int | None) -> tuple[str, list[str], int]:
    """One run of the operation with an interrupt at point ``at`` (None: count only).

    Returns the outcome ("interrupted", "not reached", "count" or "other"), the problems
    seen afterwards, and the number of points passed.
    """
    path = os.path.join(directory, "checkpoint")
    old, new = _checkpoints(scenario)
    io = _make(scenario)
    io.save_checkpoint(old, path)
    getattr(io, "wait", lambda: None)()
    operation = _operation(scenario, io, path)
    problems: list[str] = []
    profile = _Interrupt(at)
    outcome = "count"
    sys.setprofile(profile)
    try:
        operation()
    except KeyboardInterrupt:
        outcome = "interrupted"
    except BaseException as exc:
        outcome = "other"
        problems.append(f"raised {type(exc).__name__}: {exc}"[:300])
    finally:
        sys.setprofile(None)
    if at is not None and outcome == "count":
        outcome = "not reached"
        if profile.count >= at:
            problems.append("the interrupt was swallowed: the operation returned normally")
    if profile.fired_in:
        problems = [f"{p} (interrupt at {profile.fired_in})" for p in problems]
    gc.collect()  # late destructors (an unfinished torch writer) run now
    blocked = _teardown_returns(io)
    if blocked is not None:
        problems.append(blocked)
        return outcome, problems, profile.count
    left = _temps(directory)
    if left:
        problems.append(f"left {left}")
    if scenario.startswith("memory"):
        checker = io  # its store lives in this instance
    else:
        checker = _make("safetensors" if scenario.startswith("safetensors") else "torch")
    try:
        loaded = checker.load_checkpoint(path)
        if not (_same_tensors(loaded, old) or _same_tensors(loaded, new)):
            problems.append("the path holds neither the old nor the new checkpoint")
        checker.save_checkpoint(old, path)
        if not _same_tensors(checker.load_checkpoint(path), old) or _temps(directory):
            problems.append("the next save did not leave exactly the new file")
    except Exception as exc:
        problems.append(f"afterwards: {type(exc).__name__}: {exc}"[:300])
    return outcome, problems, profile.count


def _same_tensors(loaded: Checkpoint, want: Checkpoint) -> bool:
    import torch

    if "tag" in want:
        return _same(loaded, want)
    return torch.equal(loaded["weights"], want["weights"])


def _in_child(scenario: str, directory: str, at: int | None) -> dict[str, Any]:
    """Run :func:`_attempt` in a forked child; a death is reported as a problem."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 0
        try:
            os.close(read_end)
            outcome, problems, count = _attempt(scenario, directory, at)
            report = {"outcome": outcome, "problems": problems, "count": count}
            os.write(write_end, json.dumps(report).encode())
        except BaseException as exc:
            os.write(write_end, json.dumps({"outcome": "crash", "problems": [repr(exc)]}).encode())
            code = 1
        finally:
            os._exit(code)
    os.close(write_end)
    chunks = []
    with os.fdopen(read_end, "rb") as pipe:
        while chunk := pipe.read(65536):
            chunks.append(chunk)
    _, status = os.waitpid(pid, 0)
    if not chunks:
        died = (
            f"signal {signal.Signals(os.WTERMSIG(status)).name}"
            if os.WIFSIGNALED(status)
            else f"exit status {os.WEXITSTATUS(status)}"
        )
        return {"outcome": "died", "problems": [f"the process died ({died})"], "count": 0}
    return dict(json.loads(b"".join(chunks)))


def run_scenario(scenario: str, root: str, stride: int = 1) -> ScenarioResult:
    """Try every ``stride``-th interrupt point of ``scenario``."""
    started = time.perf_counter()
    result = ScenarioResult(scenario)
    directory = os.path.join(root, scenario)
    os.makedirs(directory, exist_ok=True)
    _warm_up(scenario, directory)
    gc.freeze()  # children collect only what they make (a full collection costs ~50 ms)
    counted = _in_child(scenario, directory, None)
    if counted["problems"]:
        result.failures.append(f"undisturbed run: {counted['problems']}")
    result.points = int(counted.get("count", 0))
    for at in range(1, result.points + 1, stride):
        for name in _temps(directory):  # what a failed point left is reported, then cleared
            os.unlink(os.path.join(directory, name))
        attempt = _in_child(scenario, directory, at)
        if attempt["outcome"] == "interrupted":
            result.interrupted += 1
        elif attempt["outcome"] == "not reached":
            result.not_reached += 1
        for problem in attempt["problems"]:
            result.failures.append(f"point {at}: {problem}")
    result.wall_seconds = time.perf_counter() - started
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--scenarios", default=",".join(SCENARIOS), help="comma-separated")
    parser.add_argument("--stride", type=int, default=1, help="try every n-th point")
    parser.add_argument("--dir", default=None, help="work directory (default: a temp dir)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    scenarios = [s for s in args.scenarios.split(",") if s]
    unknown = sorted(set(scenarios) - set(SCENARIOS) - set(FAULT_SCENARIOS))
    if unknown:
        parser.error(f"unknown scenarios {unknown}; choose from {SCENARIOS + FAULT_SCENARIOS}")
    if args.stride < 1:
        parser.error("--stride must be at least 1")

    import torch

    torch.set_num_threads(1)  # forked children must not wait on threads that were not forked
    signal.signal(signal.SIGINT, signal.default_int_handler)
    root = args.dir or tempfile.mkdtemp(prefix="trainspec-interrupt-")
    results = []
    try:
        for scenario in scenarios:
            result = run_scenario(scenario, root, args.stride)
            results.append(result)
            if not args.json:
                print(
                    f"{scenario:>16}: {result.points} points, {result.interrupted} interrupted, "
                    f"{result.not_reached} not reached, {len(result.failures)} failures, "
                    f"{result.wall_seconds:.1f}s"
                )
                for failure in result.failures[:20]:
                    print(f"    {failure}")
    finally:
        if args.dir is None:
            shutil.rmtree(root, ignore_errors=True)
    if args.json:
        print(json.dumps({"results": [asdict(r) for r in results]}))
    return 0 if all(not r.failures for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
