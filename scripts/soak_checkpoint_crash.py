#!/usr/bin/env python
"""Crash-consistency soak for the reference checkpoint IOs (CKPT-3).

For each scenario and signal, a writer repeatedly saves one of two recognisable checkpoints
(A, B) over the same path; it gets the signal at a random moment; then the path must load as
a complete A or B, and the next save must leave no temporary files behind.

Signals:
  KILL  SIGKILL: the writer dies on the spot; its temporary file, if any, is left for the
        next save to clean (it holds no lock any more).
  INT   SIGINT (Ctrl-C, Python's default handler): the writer must end with
        KeyboardInterrupt -- not the TypeError torch's wrapping RuntimeError used to become --
        and, before the next save, no temporary file may be left.
  TERM  SIGTERM with a handler that raises SystemExit (what a trainer that exits cleanly on
        a scheduler's SIGTERM does): as INT, with SystemExit.

torch is imported once: each writer is an ``os.fork()`` of this process (started with one
intra-op thread, so nothing in the child waits on a thread that was not forked).

Scenarios:
  torch       TorchCheckpointIO on a local path
  background  BackgroundCheckpointIO(TorchCheckpointIO()) on a local path (killed during the
              snapshot, the queue hand-off or the worker's write)
  file-url    TorchCheckpointIO on a ``file://`` URL
  in-place    a deliberately broken writer (plain ``torch.save`` onto the path), not run by
              default: it proves the soak detects torn checkpoints (it must report failures)

A writer that ends by itself reports, through a pipe, the exception that ended it and
whether a save was in progress; a BackgroundCheckpointIO writer then tears its IO down first
(waiting for its queued save), as a program's exit would.

Usage::

    python scripts/soak_checkpoint_crash.py --trials 1000            # the long soak
    python scripts/soak_checkpoint_crash.py --trials 50 --json       # what the test runs
    python scripts/soak_checkpoint_crash.py --trials 30 --signals INT,TERM

Exit status 0 when every trial passed, 1 otherwise. POSIX only (fork, signals).
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import os
import random
import shutil
import signal
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from trainspec import CheckpointIO
    from trainspec.types import Checkpoint

SCENARIOS = ("torch", "background", "file-url")
FAULT_SCENARIOS = ("in-place",)
SIGNALS = {"KILL": signal.SIGKILL, "INT": signal.SIGINT, "TERM": signal.SIGTERM}
EXPECTED_ENDING = {"INT": "KeyboardInterrupt", "TERM": "SystemExit"}
EXIT_WAIT_S = 30.0
_CATCHABLE = {signal.SIGINT, signal.SIGTERM}


@dataclass
class ScenarioResult:
    """What one scenario observed; ``failures`` lists every violated trial."""

    scenario: str
    signal: str = "KILL"
    trials: int = 0
    failures: list[str] = field(default_factory=list)
    # signals that landed during a save: for KILL, a temporary file was left; for INT and
    # TERM, the writer reported a save in progress when the exception reached it
    mid_save_signals: int = 0
    endings: dict[str, int] = field(default_factory=dict)  # how writers ended, by name
    loaded_a: int = 0
    loaded_b: int = 0
    writer_exited_early: int = 0
    save_seconds: float = 0.0
    wall_seconds: float = 0.0


def _make_checkpoint(tag: str, size_mb: float) -> Checkpoint:
    import torch

    numel = max(1, int(size_mb * 2**20) // 4)
    value = 1.0 if tag == "A" else 2.0
    weights = torch.full((numel,), value)
    return {
        "tag": tag,
        "step": 1 if tag == "A" else 2,
        "weights": weights,
        "every_1000th": weights[::1000],  # a view sharing storage with "weights"
        "meta": {"names": [tag] * 3, "lr": 0.1 * value, "none": None},
    }


def _check_loaded(loaded: Checkpoint, expected: dict[str, Checkpoint]) -> str | None:
    """None when ``loaded`` is exactly A or B, else what is wrong."""
    import torch

    tag = loaded.get("tag")
    if tag not in expected:
        return f"unexpected tag {tag!r}"
    want = expected[tag]
    if loaded["step"] != want["step"] or loaded["meta"] != want["meta"]:
        return f"metadata of {tag} differs: {loaded['step']!r}, {loaded['meta']!r}"
    if not torch.equal(loaded["weights"], want["weights"]):
        return f"weights of {tag} differ"
    view = loaded["every_1000th"]
    if not torch.equal(view, want["every_1000th"]):
        return f"view of {tag} differs"
    if view.untyped_storage().data_ptr() != loaded["weights"].untyped_storage().data_ptr():
        return f"view of {tag} no longer shares storage with weights"
    return None


class _InPlaceWriter:
    """The fault the soak must catch: writes straight onto the target, not atomically."""

    def save_checkpoint(self, checkpoint: Checkpoint, path: str) -> None:
        import torch

        torch.save(checkpoint, path)


def _make_io(scenario: str) -> CheckpointIO | _InPlaceWriter:
    from trainspec.reference.checkpoint_io import BackgroundCheckpointIO, TorchCheckpointIO

    if scenario == "background":
        return BackgroundCheckpointIO(TorchCheckpointIO())
    if scenario == "in-place":
        return _InPlaceWriter()
    return TorchCheckpointIO()


def _raise_system_exit(signum: int, frame: object) -> None:
    sys.exit(128 + signum)


def _writer(
    io: CheckpointIO | _InPlaceWriter, path: str, contents: list[Checkpoint], report: int
) -> None:
    """Child process body: save A, B, A, ... until a signal ends it. Never returns.

    Writes ``"<exception class> <1 if a save was in progress else 0>"`` to the ``report``
    pipe when an exception ends the loop.
    """
    in_save = False
    message = "none 0"
    try:
        faulthandler.register(signal.SIGUSR1, all_threads=True)  # the parent's hang report
        signal.pthread_sigmask(signal.SIG_UNBLOCK, _CATCHABLE)  # blocked across the fork
        i = 0
        while True:
            in_save = True
            io.save_checkpoint(contents[i % 2], path)
            in_save = False
            i += 1
    except BaseException as exc:
        message = f"{type(exc).__name__} {int(in_save)}"
        if not isinstance(exc, (KeyboardInterrupt, SystemExit)):
            print(f"writer failed: {exc!r}", file=sys.stderr)
    finally:
        try:
            teardown = getattr(io, "teardown", None)
            if teardown is not None:
                teardown()  # a background save still queued is finished, as at exit
        except BaseException as exc:
            message += f" teardown:{type(exc).__name__}"
        os.write(report, message.encode())
        os._exit(0)


def _wait_for_exit(pid: int) -> int | None:
    """The wait status of ``pid`` once it has ended, or ``None`` after EXIT_WAIT_S."""
    deadline = time.monotonic() + EXIT_WAIT_S
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return status
        time.sleep(0.01)
    return None


def run_scenario(
    scenario: str,
    trials: int,
    size_mb: float,
    root: str,
    rng: random.Random,
    signal_name: str = "KILL",
) -> ScenarioResult:
    """Run ``trials`` signal-and-verify rounds of ``scenario`` under ``root``."""
    from trainspec.reference.checkpoint_io import TorchCheckpointIO
    from trainspec.reference.checkpoint_io._storage import temp_prefix

    result = ScenarioResult(scenario, signal_name)
    signum = SIGNALS[signal_name]
    started = time.perf_counter()
    directory = os.path.join(root, f"{scenario}-{signal_name}")
    os.makedirs(directory, exist_ok=True)
    local_path = os.path.join(directory, "checkpoint.pt")
    path = "file://" + local_path if scenario == "file-url" else local_path
    contents = [_make_checkpoint("A", size_mb), _make_checkpoint("B", size_mb)]
    expected = {c["tag"]: c for c in contents}
    prefix = temp_prefix(os.path.basename(local_path))
    verifier = TorchCheckpointIO()

    def temps() -> list[str]:
        return [n for n in os.listdir(directory) if n.startswith(prefix)]

    t0 = time.perf_counter()
    verifier.save_checkpoint(contents[0], path)
    result.save_seconds = time.perf_counter() - t0
    # Kill anywhere within about three saves; the background writer also snapshots first.
    window = 3.0 * result.save_seconds
    io = _make_io(scenario)

    for trial in range(trials):
        result.trials += 1
        read_end, write_end = os.pipe()
        # Blocked until the writer is inside its try: an early signal must not let the child
        # run on into this function's code.
        signal.pthread_sigmask(signal.SIG_BLOCK, _CATCHABLE)
        pid = os.fork()
        if pid == 0:
            try:
                os.close(read_end)
                _writer(io, path, contents, write_end)
            finally:
                os._exit(1)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, _CATCHABLE)
        os.close(write_end)
        time.sleep(rng.uniform(0.0, window))
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            pass
        status = _wait_for_exit(pid)
        if status is None:
            os.kill(pid, signal.SIGUSR1)  # its threads' stacks, to stderr
            time.sleep(1.0)
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            result.failures.append(f"trial {trial}: writer still running after SIG{signal_name}")
        with os.fdopen(read_end, "rb") as pipe:
            report = pipe.read().decode().split()
        if signal_name == "KILL":
            ending = "killed" if os.WIFSIGNALED(status or 0) else " ".join(report) or "?"
            if ending != "killed":
                result.writer_exited_early += 1
                result.failures.append(f"trial {trial}: writer exited by itself ({ending})")
            if temps():
                result.mid_save_signals += 1
        else:
            ending = report[0] if report else f"no report (wait status {status})"
            if ending != EXPECTED_ENDING[signal_name] or len(report) != 2:
                result.failures.append(
                    f"trial {trial}: SIG{signal_name} ended the writer with "
                    f"{' '.join(report) or ending}, not {EXPECTED_ENDING[signal_name]}"
                )
            elif report[1] == "1":
                result.mid_save_signals += 1
            left = temps()
            if left:
                result.failures.append(f"trial {trial}: the interrupted save left {left}")
        result.endings[ending] = result.endings.get(ending, 0) + 1
        try:
            loaded = verifier.load_checkpoint(path)
        except Exception as exc:
            result.failures.append(f"trial {trial}: load after the signal raised {exc!r}")
        else:
            problem = _check_loaded(loaded, expected)
            if problem is not None:
                result.failures.append(f"trial {trial}: torn checkpoint: {problem}")
            elif loaded["tag"] == "A":
                result.loaded_a += 1
            else:
                result.loaded_b += 1
            del loaded
        # The next save must clean up what the killed writer left.
        verifier.save_checkpoint(contents[trial % 2], path)
        left = temps()
        if left:
            result.failures.append(f"trial {trial}: the next save left temporary files {left}")
    result.wall_seconds = time.perf_counter() - started
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=1000, help="signals per scenario")
    parser.add_argument("--size-mb", type=float, default=32.0, help="checkpoint size in MiB")
    parser.add_argument("--scenarios", default=",".join(SCENARIOS), help="comma-separated")
    parser.add_argument(
        "--signals", default=",".join(SIGNALS), help=f"comma-separated, of {', '.join(SIGNALS)}"
    )
    parser.add_argument("--dir", default=None, help="work directory (default: a temp dir)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    scenarios = [s for s in args.scenarios.split(",") if s]
    unknown = sorted(set(scenarios) - set(SCENARIOS) - set(FAULT_SCENARIOS))
    if unknown:
        choices = ", ".join(SCENARIOS + FAULT_SCENARIOS)
        parser.error(f"unknown scenarios {unknown}; choose from {choices}")
    signals = [s.strip().upper().removeprefix("SIG") for s in args.signals.split(",") if s]
    unknown = sorted(set(signals) - set(SIGNALS))
    if unknown or not signals:
        parser.error(f"unknown signals {unknown or signals}; choose from {', '.join(SIGNALS)}")

    import torch

    torch.set_num_threads(1)  # no intra-op pool: forked writers must not wait on lost threads
    # Writers inherit these. SIGINT gets Python's handler even where it was ignored (a
    # background job of a shell), SIGTERM the handler of a trainer that exits cleanly.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, _raise_system_exit)
    rng = random.Random(args.seed)
    root = args.dir or tempfile.mkdtemp(prefix="trainspec-soak-")
    results = []
    try:
        for name in signals:
            for scenario in scenarios:
                result = run_scenario(scenario, args.trials, args.size_mb, root, rng, name)
                results.append(result)
                if args.json:
                    continue
                endings = ", ".join(f"{k} {v}" for k, v in sorted(result.endings.items()))
                print(
                    f"{scenario:>10} SIG{name:<4}: {result.trials} trials, "
                    f"{len(result.failures)} failures, {result.mid_save_signals} mid-save, "
                    f"loaded A/B {result.loaded_a}/{result.loaded_b}, ended: {endings}, "
                    f"one save {result.save_seconds:.3f}s, {result.wall_seconds:.1f}s"
                )
                for failure in result.failures[:20]:
                    print(f"    {failure}")
    finally:
        if args.dir is None:
            shutil.rmtree(root, ignore_errors=True)
    if args.json:
        print(json.dumps({"size_mb": args.size_mb, "results": [asdict(r) for r in results]}))
    return 0 if all(not r.failures for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
