"""The distributed harness: a persistent world against a fresh world per check.

A persistent :class:`~trainspec.conformance.distributed.World` pays for starting its ranks
(spawn, import torch and the checks) once and then a small cost per check; starting a fresh
world for every check pays the start-up every time. Both run the same cheap distributed check
(each run sets up and tears down a gloo process group on every rank) with the reference
``TorchCollective`` on 2 ranks. The fresh-world cost of 50 checks is *extrapolated* from a few
measured fresh worlds (start + one check + close each); the persistent figures are measured.

    python -m benchmarks.distributed_harness [--checks 50] [--fresh-samples 3] [--smoke]
"""

from __future__ import annotations

import argparse
import statistics
import time

from benchmarks._common import markdown_table

_CHECK = "check_collective_ranks_are_distinct_and_in_all_gather_order"
_FACTORY = "trainspec.reference.collectives.torch_dist:TorchCollective"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--checks", type=int, default=50, help="checks in the long run")
    parser.add_argument("--fresh-samples", type=int, default=3, help="fresh worlds to measure")
    parser.add_argument("--world-size", type=int, default=2)
    parser.add_argument("--smoke", action="store_true", help="5 checks, 1 fresh world")
    args = parser.parse_args(argv)
    if args.smoke:
        args.checks, args.fresh_samples = 5, 1

    from trainspec.conformance.distributed import TargetSpec, World

    spec = TargetSpec("collective", _FACTORY)

    def run_one(world: World) -> None:
        result = world.run(_CHECK, spec, timeout_s=120)
        if result.status != "passed":
            raise SystemExit(f"benchmark check did not pass:\n{result.message}")

    # Persistent world: start once, then every check in it.
    started = time.perf_counter()
    with World(args.world_size) as world:
        startup = time.perf_counter() - started
        per_check: list[float] = []
        for _ in range(args.checks):
            begin = time.perf_counter()
            run_one(world)
            per_check.append(time.perf_counter() - begin)
        starts = world.starts
    closed = time.perf_counter() - started
    close = closed - startup - sum(per_check)
    persistent_one = startup + per_check[0] + close  # like a fresh world: start, check, close
    persistent_all = closed
    if starts != 1:
        raise SystemExit(f"the persistent world restarted ({starts} starts)")

    # Fresh world per check: start, one check, close; measured a few times.
    fresh: list[float] = []
    for _ in range(args.fresh_samples):
        begin = time.perf_counter()
        with World(args.world_size) as world:
            run_one(world)
        fresh.append(time.perf_counter() - begin)
    fresh_one = statistics.median(fresh)
    fresh_all = fresh_one * args.checks

    print(
        f"{args.world_size} gloo ranks; check `{_CHECK}` on `{_FACTORY}`. Persistent figures "
        f"measured; fresh-world figures: median of {len(fresh)} measured fresh worlds (start + "
        f"1 check + close), {args.checks}-check figure extrapolated as {args.checks} x that. "
        "Every figure includes starting and closing the world.\n"
    )
    rows = [
        [
            "persistent world",
            f"{persistent_one:.2f} s",
            f"{persistent_all:.2f} s",
            f"start {startup:.2f} s + {statistics.median(per_check) * 1000:.0f} ms/check "
            f"(median) + close {close:.2f} s",
        ],
        [
            "fresh world per check",
            f"{fresh_one:.2f} s",
            f"{fresh_all:.2f} s (extrapolated)",
            f"{fresh_one:.2f} s/check (measured {', '.join(f'{f:.2f}' for f in fresh)})",
        ],
    ]
    print(markdown_table(["harness", "1 check", f"{args.checks} checks", "cost"], rows))
    print(f"\nSpeed-up for {args.checks} checks: {fresh_all / persistent_all:.1f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
