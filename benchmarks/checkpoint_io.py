"""Checkpoint IO throughput: trainspec's TorchCheckpointIO against raw torch.save/torch.load
(targets: >= 0.95x raw throughput, atomic write and fsync included), and the blocking time of
BackgroundCheckpointIO.save_checkpoint as a fraction of a synchronous save (target <= 10%).

    python -m benchmarks.checkpoint_io [--mib 256] [--repetitions 9] [--smoke]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import torch

from benchmarks._common import interleaved, markdown_table


def make_state(mib: int) -> dict[str, object]:
    n_tensors = 16
    numel = mib * 1024 * 1024 // 4 // n_tensors
    gen = torch.Generator().manual_seed(0)
    return {
        "model": {f"layer{i}.weight": torch.randn(numel, generator=gen) for i in range(n_tensors)},
        "step": 1234,
        "note": "benchmark",
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--mib", type=int, default=256)
    parser.add_argument("--repetitions", type=int, default=9)
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, 1 repetition")
    args = parser.parse_args(argv)
    if args.smoke:
        args.mib, args.repetitions = 4, 1

    from trainspec.reference.checkpoint_io.background import BackgroundCheckpointIO
    from trainspec.reference.checkpoint_io.torch_io import TorchCheckpointIO

    state = make_state(args.mib)
    io = TorchCheckpointIO()
    background = BackgroundCheckpointIO(TorchCheckpointIO())
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_DIR")) as tmp:
        raw_path = os.path.join(tmp, "raw.pt")
        ts_path = os.path.join(tmp, "trainspec.pt")
        bg_path = os.path.join(tmp, "background.pt")

        def timed(fn: object) -> float:
            start = time.perf_counter()
            fn()  # type: ignore[operator]
            return time.perf_counter() - start

        def raw_save() -> float:
            def run() -> None:
                with open(raw_path, "wb") as f:
                    torch.save(state, f)
                    f.flush()
                    os.fsync(f.fileno())

            return timed(run)

        def ts_save() -> float:
            return timed(lambda: io.save_checkpoint(state, ts_path))

        def bg_block() -> float:
            start = time.perf_counter()
            background.save_checkpoint(state, bg_path)
            blocked = time.perf_counter() - start
            background.wait()
            return blocked

        saves = interleaved(
            {
                "raw torch.save (+fsync)": raw_save,
                "TorchCheckpointIO.save": ts_save,
                "BackgroundCheckpointIO.save (blocking part)": bg_block,
            },
            args.repetitions,
        )

        def raw_load() -> float:
            return timed(lambda: torch.load(raw_path, weights_only=True))

        def ts_load() -> float:
            return timed(lambda: io.load_checkpoint(ts_path))

        loads = interleaved(
            {"raw torch.load": raw_load, "TorchCheckpointIO.load": ts_load}, args.repetitions
        )
        background.teardown()

    raw_s, ts_s = saves["raw torch.save (+fsync)"], saves["TorchCheckpointIO.save"]
    bg = saves["BackgroundCheckpointIO.save (blocking part)"]
    raw_l, ts_l = loads["raw torch.load"], loads["TorchCheckpointIO.load"]
    rows = [
        [
            "save",
            f"{args.mib / raw_s.median:.0f}",
            f"{args.mib / ts_s.median:.0f}",
            f"{1 / ts_s.paired_ratio(raw_s):.3f}",
            ">= 0.95",
        ],
        [
            "load",
            f"{args.mib / raw_l.median:.0f}",
            f"{args.mib / ts_l.median:.0f}",
            f"{1 / ts_l.paired_ratio(raw_l):.3f}",
            ">= 0.95",
        ],
    ]
    print(f"State dict: {args.mib} MiB, {args.repetitions} interleaved repetitions\n")
    print(
        markdown_table(
            ["operation", "raw MiB/s", "trainspec MiB/s", "throughput ratio", "target"], rows
        )
    )
    print()
    frac = bg.paired_ratio(ts_s)
    print(
        markdown_table(
            ["async save", "blocking ms", "sync save ms", "fraction", "target"],
            [
                [
                    "BackgroundCheckpointIO",
                    f"{bg.median * 1000:.0f}",
                    f"{ts_s.median * 1000:.0f}",
                    f"{frac:.1%}",
                    "<= 10%",
                ]
            ],
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
