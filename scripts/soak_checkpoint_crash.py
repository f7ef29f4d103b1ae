#!/usr/bin/env python
"""Crash-consistency soak for the reference checkpoint IOs (CKPT-3).

For each scenario, a writer repeatedly saves one of two recognisable checkpoints (A, B)
over the same path; it is SIGKILLed at a random moment; then the path must load as a
complete A or B, and the next save must leave no temporary files behind.

torch is imported once: each writer is an ``os.fork()`` of this process (started with one
intra-op thread, so nothing in the child waits on a thread that was not forked).

Scenarios:
  torch       TorchCheckpointIO on a local path
  background  BackgroundCheckpointIO(TorchCheckpointIO()) on a local path (killed during the
              snapshot, the queue hand-off or the worker's write)
  file-url    TorchCheckpointIO on a ``file://`` URL
  in-place    a deliberately broken writer (plain ``torch.save`` onto the path), not run by
              default: it proves the soak detects torn checkpoints (it must report failures)

Usage::

    python scripts/soak_checkpoint_crash.py --trials 1000            # the long soak
    python scripts/soak_checkpoint_crash.py --trials 50 --json       # what the test runs

Exit status 0 when every trial passed, 1 otherwise. POSIX only (fork, SIGKILL).
"""

from __future__ import annotations

import argparse
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


@dataclass
class ScenarioResult:
    """What one scenario observed; ``failures`` lists every violated trial."""

    scenario: str
    trials: int = 0
    failures: list[str] = field(default_factory=list)
    mid_write_kills: int = 0  # kills that left a temporary file: the writer was mid-write
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


def _writer(io: CheckpointIO | _InPlaceWriter, path: str, contents: list[Checkpoint]) -> None:
    """Child process body: save A, B, A, ... until killed. Never returns."""
    code = 1
    try:
        i = 0
        while True:
            io.save_checkpoint(contents[i % 2], path)
            i += 1
    except BaseException as exc:  # reported by the parent as "writer exited early"
        print(f"writer failed: {exc!r}", file=sys.stderr)
    finally:
        os._exit(code)


def run_scenario(
    scenario: str, trials: int, size_mb: float, root: str, rng: random.Random
) -> ScenarioResult:
    """Run ``trials`` kill-and-verify rounds of ``scenario`` under ``root``."""
    from trainspec.reference.checkpoint_io import TorchCheckpointIO
    from trainspec.reference.checkpoint_io._storage import temp_prefix

    result = ScenarioResult(scenario)
    started = time.perf_counter()
    directory = os.path.join(root, scenario)
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
        pid = os.fork()
        if pid == 0:
            _writer(io, path, contents)
        time.sleep(rng.uniform(0.0, window))
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        _, status = os.waitpid(pid, 0)
        if not (os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL):
            result.writer_exited_early += 1
            result.failures.append(f"trial {trial}: writer exited by itself ({status=})")
        if temps():
            result.mid_write_kills += 1
        try:
            loaded = verifier.load_checkpoint(path)
        except Exception as exc:
            result.failures.append(f"trial {trial}: load after kill raised {exc!r}")
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
    parser.add_argument("--trials", type=int, default=1000, help="kills per scenario")
    parser.add_argument("--size-mb", type=float, default=32.0, help="checkpoint size in MiB")
    parser.add_argument("--scenarios", default=",".join(SCENARIOS), help="comma-separated")
    parser.add_argument("--dir", default=None, help="work directory (default: a temp dir)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    scenarios = [s for s in args.scenarios.split(",") if s]
    unknown = sorted(set(scenarios) - set(SCENARIOS) - set(FAULT_SCENARIOS))
    if unknown:
        choices = ", ".join(SCENARIOS + FAULT_SCENARIOS)
        parser.error(f"unknown scenarios {unknown}; choose from {choices}")

    import torch

    torch.set_num_threads(1)  # no intra-op pool: forked writers must not wait on lost threads
    rng = random.Random(args.seed)
    root = args.dir or tempfile.mkdtemp(prefix="trainspec-soak-")
    results = []
    try:
        for scenario in scenarios:
            result = run_scenario(scenario, args.trials, args.size_mb, root, rng)
            results.append(result)
            if not args.json:
                print(
                    f"{scenario:>10}: {result.trials} trials, {len(result.failures)} failures, "
                    f"{result.mid_write_kills} kills mid-write, loaded A/B "
                    f"{result.loaded_a}/{result.loaded_b}, one save {result.save_seconds:.3f}s, "
                    f"{result.wall_seconds:.1f}s"
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
