"""Where trainspec's per-step overhead comes from: the raw tiny-MLP loop with one Runner call
swapped in at a time (``runner.autocast()``, ``runner.backward``, ``runner.step``), then all
three, interleaved on one shared module. A diagnostic for docs/benchmarks.md, not part of
``run_all``.

    python -m benchmarks.step_ablation [--repetitions 300] [--steps 10] [--precision 32-true]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from torch import nn

from benchmarks._common import interleaved, markdown_table, ratio_rows
from benchmarks.step_overhead import Problem, StepLoop, make_model, raw_context, raw_loop

SWAPS = {
    "raw": (False, False, False),
    "runner.autocast()": (True, False, False),
    "runner.backward": (False, True, False),
    "runner.step": (False, False, True),
    "all three (the trainspec loop)": (True, True, True),
}


def swapped_loop(problem: Problem, flag: str, swaps: tuple[bool, bool, bool]) -> StepLoop:
    from trainspec.reference.precisions import precision_for_flag
    from trainspec.reference.runner import Runner
    from trainspec.reference.strategies.single_device import SingleDeviceStrategy

    use_context, use_backward, use_step = swaps
    runner = Runner(SingleDeviceStrategy(precision=precision_for_flag(flag)))
    module, x, y = problem
    module, optimizer = runner.setup(module, torch.optim.SGD(module.parameters(), lr=1e-3))
    loss_fn = nn.MSELoss()

    context = runner.autocast if use_context else raw_context(flag)

    def run(steps: int) -> float:
        times = []
        for _ in range(steps):
            start = time.perf_counter()
            with context():
                loss = loss_fn(module(x), y)
            if use_backward:
                runner.backward(loss, module)
            else:
                loss.backward()
            if use_step:
                runner.step(optimizer)
            else:
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
            times.append(time.perf_counter() - start)
        return statistics.median(times)

    return run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repetitions", type=int, default=300)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--precision", default="32-true", choices=("32-true", "bf16-mixed"))
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    problem = make_model("tiny MLP")
    loops = {
        name: raw_loop(problem, args.precision)
        if name == "raw"
        else swapped_loop(problem, args.precision, swaps)
        for name, swaps in SWAPS.items()
    }
    measured = interleaved(
        {name: (lambda loop=loop: loop(args.steps)) for name, loop in loops.items()},
        args.repetitions,
    )
    print(f"tiny MLP, {args.precision}, {args.repetitions} interleaved repetitions\n")
    print(markdown_table(["loop", "µs/step", "/ raw"], ratio_rows(measured, "raw", digits=4)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
