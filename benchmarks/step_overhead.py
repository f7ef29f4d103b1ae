"""Per-step overhead, one process: a raw PyTorch loop, the same loop through
``trainspec.reference.Runner`` + ``SingleDeviceStrategy``, and through Lightning Fabric.

The variants of a row train the *same* module on the same tensors (each with its own
optimizer over those parameters), so no variant gets luckier memory placement than another.
Each repetition runs a short block of steps per variant, timing every step; a block's figure
is its median step, which a preemption of this shared machine cannot move. Blocks are
interleaved (``benchmarks._common.interleaved``), and the ratio to raw is the median of the
per-repetition ratios. Rows: a tiny MLP (overhead-bound) and a wider MLP (compute-bound), for
``32-true`` and ``bf16-mixed``. Target: trainspec <= 1.03x raw in every row, and faster than
Fabric. Peak RSS of each variant is measured in a fresh subprocess running that variant alone.

    python -m benchmarks.step_overhead [--repetitions 300] [--steps 10] [--smoke]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import sys
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext

import torch
from torch import nn

from benchmarks._common import (
    interleaved,
    machine_description,
    markdown_table,
    peak_rss_mib,
    run_json_subprocess,
)

MODELS = {
    # name: (in, hidden, out, batch)
    "tiny MLP": (32, 64, 8, 16),
    "wide MLP": (512, 2048, 512, 128),
}
FLAGS = ("32-true", "bf16-mixed")


Problem = tuple[nn.Module, torch.Tensor, torch.Tensor]


def make_model(model: str) -> Problem:
    d_in, hidden, d_out, batch = MODELS[model]
    torch.manual_seed(0)
    module = nn.Sequential(nn.Linear(d_in, hidden), nn.ReLU(), nn.Linear(hidden, d_out))
    x = torch.randn(batch, d_in)
    y = torch.randn(batch, d_out)
    return module, x, y


StepLoop = Callable[[int], float]
"""Runs that many steps and returns the median seconds per step."""


def raw_context(flag: str) -> Callable[[], AbstractContextManager[object]]:
    """What a hand-written loop enters around its forward for ``flag``."""
    if flag == "bf16-mixed":
        return lambda: torch.autocast("cpu", dtype=torch.bfloat16)
    return nullcontext


def raw_loop(problem: Problem, flag: str) -> StepLoop:
    module, x, y = problem
    optimizer = torch.optim.SGD(module.parameters(), lr=1e-3)
    loss_fn = nn.MSELoss()
    context = raw_context(flag)

    def run(steps: int) -> float:
        times = []
        for _ in range(steps):
            start = time.perf_counter()
            with context():
                loss = loss_fn(module(x), y)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            times.append(time.perf_counter() - start)
        return statistics.median(times)

    return run


def trainspec_loop(problem: Problem, flag: str) -> StepLoop:
    from trainspec.reference.precisions import precision_for_flag
    from trainspec.reference.runner import Runner
    from trainspec.reference.strategies.single_device import SingleDeviceStrategy

    runner = Runner(SingleDeviceStrategy(precision=precision_for_flag(flag)))
    module, x, y = problem
    module, optimizer = runner.setup(module, torch.optim.SGD(module.parameters(), lr=1e-3))
    x, y = runner.to_device((x, y))
    loss_fn = nn.MSELoss()

    def run(steps: int) -> float:
        times = []
        for _ in range(steps):
            start = time.perf_counter()
            with runner.autocast():
                loss = loss_fn(module(x), y)
            runner.backward(loss, module)
            runner.step(optimizer)
            times.append(time.perf_counter() - start)
        return statistics.median(times)

    return run


def fabric_loop(problem: Problem, flag: str) -> StepLoop:
    from lightning.fabric import Fabric

    fabric = Fabric(accelerator="cpu", devices=1, precision=flag)  # type: ignore[arg-type]
    module, x, y = problem
    module, optimizer = fabric.setup(module, torch.optim.SGD(module.parameters(), lr=1e-3))
    x, y = fabric.to_device((x, y))
    loss_fn = nn.MSELoss()

    def run(steps: int) -> float:
        times = []
        for _ in range(steps):
            start = time.perf_counter()
            loss = loss_fn(module(x), y)
            fabric.backward(loss)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            times.append(time.perf_counter() - start)
        return statistics.median(times)

    return run


VARIANTS: dict[str, Callable[[Problem, str], StepLoop]] = {
    "raw": raw_loop,
    "trainspec": trainspec_loop,
    "fabric": fabric_loop,
}


def rss_of_variant(variant: str, model: str, flag: str, steps: int) -> float:
    """Peak RSS (MiB) of a fresh process that imports what the variant needs and runs it."""
    result = run_json_subprocess(
        ["-m", "benchmarks.step_overhead", "--rss-child", variant, model, flag, str(steps)]
    )
    assert isinstance(result, dict)
    return float(result["rss_mib"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repetitions", type=int, default=300)
    parser.add_argument(
        "--steps", type=int, default=10, help="steps per block (the wide model: a fifth)"
    )
    parser.add_argument("--smoke", action="store_true", help="few steps, no RSS subprocesses")
    parser.add_argument("--rss-child", nargs=4, metavar=("VARIANT", "MODEL", "FLAG", "STEPS"))
    args = parser.parse_args(argv)
    if args.rss_child:
        variant, model, flag, steps = args.rss_child
        VARIANTS[variant](make_model(model), flag)(int(steps))
        print(json.dumps({"rss_mib": peak_rss_mib()}))
        return 0
    if args.smoke:
        args.repetitions, args.steps = 2, 3
    variants = dict(VARIANTS)
    if importlib.util.find_spec("lightning") is None:
        print("lightning not installed: Fabric column skipped (pip install 'trainspec[bench]')")
        del variants["fabric"]
    torch.set_num_threads(1)
    print(f"Machine: {machine_description()} (benchmark uses 1 torch thread)")
    wide_steps = max(args.steps // 5, 2)
    print(
        f"{args.repetitions} interleaved repetitions of a block of {args.steps} steps "
        f"(wide MLP: {wide_steps}) per variant; a block's figure is its median step\n"
    )
    rows = []
    for model in MODELS:
        for flag in FLAGS:
            problem = make_model(model)  # one module and batch, trained by every variant
            loops = {name: make(problem, flag) for name, make in variants.items()}
            # The wide model's steps are ~100x longer: fewer of them keep the run short.
            steps = args.steps if model == "tiny MLP" else wide_steps
            measured = interleaved(
                {name: (lambda loop=loop, n=steps: loop(n)) for name, loop in loops.items()},
                args.repetitions,
            )
            raw = measured["raw"]
            row: list[object] = [model, flag, f"{raw.median * 1e6:.1f}"]
            row.append(f"{measured['trainspec'].median * 1e6:.1f}")
            row.append(f"{measured['trainspec'].paired_ratio(raw):.3f}")
            if "fabric" in measured:
                row.append(f"{measured['fabric'].median * 1e6:.1f}")
                row.append(f"{measured['fabric'].paired_ratio(raw):.3f}")
            rows.append(row)
    header = ["model", "precision", "raw µs/step", "trainspec µs/step", "trainspec / raw"]
    if "fabric" in variants:
        header += ["Fabric µs/step", "Fabric / raw"]
    print(markdown_table(header, rows))
    if not args.smoke:
        print()
        rss_rows = []
        for model in MODELS:
            rss = {v: rss_of_variant(v, model, "32-true", 50) for v in variants}
            rss_rows.append([model, *(f"{rss[v]:.0f}" for v in variants)])
        print(
            markdown_table(["model (32-true)", *(f"{v} peak RSS MiB" for v in variants)], rss_rows)
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
