"""Per-step overhead, DDP on 2 gloo ranks: raw ``DistributedDataParallel`` vs trainspec's
``DDPStrategy`` through ``Runner`` vs Lightning Fabric's DDP. Target: trainspec <= 1.03x raw.

The command starts 2 ranks with torchrun; every rank runs the three loops interleaved
(same model, data and seed; each variant its own copy, as two DDP wrappers cannot share
parameters) and rank 0 prints the table. Each repetition runs a short block of steps per
variant and times every step; a block's figure is its median step, and the ratio to raw is
the median of the per-repetition ratios.

    python -m benchmarks.ddp_overhead [--repetitions 100] [--steps 10] [--smoke]
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import subprocess
import sys
import time
from typing import TYPE_CHECKING

import torch
from torch import nn

from benchmarks._common import interleaved, machine_description, markdown_table

if TYPE_CHECKING:
    from collections.abc import Callable

MODELS = {"tiny MLP": (32, 64, 8, 16), "wide MLP": (512, 1024, 512, 64)}


def make_model(model: str, rank: int) -> tuple[nn.Module, torch.Tensor, torch.Tensor]:
    d_in, hidden, d_out, batch = MODELS[model]
    torch.manual_seed(0)
    module = nn.Sequential(nn.Linear(d_in, hidden), nn.ReLU(), nn.Linear(hidden, d_out))
    gen = torch.Generator().manual_seed(rank + 1)
    return module, torch.randn(batch, d_in, generator=gen), torch.randn(batch, d_out, generator=gen)


def timed_loop(step: Callable[[], None]) -> Callable[[int], float]:
    def run(steps: int) -> float:
        times = []
        for _ in range(steps):
            start = time.perf_counter()
            step()
            times.append(time.perf_counter() - start)
        return statistics.median(times)

    return run


def worker(args: argparse.Namespace) -> None:
    from trainspec.reference.runner import Runner
    from trainspec.reference.strategies.ddp import DDPStrategy

    torch.set_num_threads(1)
    runner = Runner(DDPStrategy(parallel_devices=[torch.device("cpu")] * 2))
    runner.setup_module(nn.Linear(1, 1))  # sets the environment (process group) up once
    rank = runner.global_rank
    fabric = None
    if args.fabric:
        from lightning.fabric import Fabric

        fabric = Fabric(accelerator="cpu", strategy="ddp", devices=2)
        fabric.launch()
    loss_fn = nn.MSELoss()
    rows = []
    for model in MODELS:
        loops: dict[str, Callable[[int], float]] = {}

        module, x, y = make_model(model, rank)
        raw = nn.parallel.DistributedDataParallel(module)
        raw_opt = torch.optim.SGD(raw.parameters(), lr=1e-3)

        def raw_step(
            m: nn.Module = raw,
            o: torch.optim.Optimizer = raw_opt,
            x: torch.Tensor = x,
            y: torch.Tensor = y,
        ) -> None:
            loss = loss_fn(m(x), y)
            loss.backward()
            o.step()
            o.zero_grad(set_to_none=True)

        loops["raw"] = timed_loop(raw_step)

        module, x2, y2 = make_model(model, rank)
        ts_module, ts_opt = runner.setup(module, torch.optim.SGD(module.parameters(), lr=1e-3))

        def ts_step(
            m: nn.Module = ts_module,
            o: torch.optim.Optimizer = ts_opt,
            x: torch.Tensor = x2,
            y: torch.Tensor = y2,
        ) -> None:
            with runner.autocast():
                loss = loss_fn(m(x), y)
            runner.backward(loss, m)
            runner.step(o)

        loops["trainspec"] = timed_loop(ts_step)

        if fabric is not None:
            module, x3, y3 = make_model(model, rank)
            f_module, f_opt = fabric.setup(module, torch.optim.SGD(module.parameters(), lr=1e-3))

            def fabric_step(
                m: nn.Module = f_module,
                o: torch.optim.Optimizer = f_opt,
                x: torch.Tensor = x3,
                y: torch.Tensor = y3,
            ) -> None:
                loss = loss_fn(m(x), y)
                fabric.backward(loss)
                o.step()
                o.zero_grad(set_to_none=True)

            loops["fabric"] = timed_loop(fabric_step)

        measured = interleaved(
            {name: (lambda loop=loop: loop(args.steps)) for name, loop in loops.items()},
            args.repetitions,
        )
        base = measured["raw"]
        row: list[object] = [
            model,
            f"{base.median * 1e6:.0f}",
            f"{measured['trainspec'].median * 1e6:.0f}",
            f"{measured['trainspec'].paired_ratio(base):.3f}",
        ]
        if "fabric" in measured:
            row += [
                f"{measured['fabric'].median * 1e6:.0f}",
                f"{measured['fabric'].paired_ratio(base):.3f}",
            ]
        rows.append(row)
    if rank == 0:
        header = [
            "model (32-true, 2 ranks)",
            "raw DDP µs/step",
            "trainspec µs/step",
            "trainspec / raw",
        ]
        if fabric is not None:
            header += ["Fabric µs/step", "Fabric / raw"]
        print(f"Machine: {machine_description()}")
        print(
            f"{args.repetitions} interleaved repetitions of a block of {args.steps} steps per "
            "variant (a block's figure is its median step), gloo\n"
        )
        print(markdown_table(header, rows), flush=True)
    runner.teardown()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repetitions", type=int, default=100)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--no-fabric", dest="fabric", action="store_false")
    args = parser.parse_args(argv)
    if args.smoke:
        args.repetitions, args.steps = 1, 3
    if args.fabric and importlib.util.find_spec("lightning") is None:
        args.fabric = False
    if args.worker:
        worker(args)
        return 0
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc-per-node",
        "2",
        "-m",
        "benchmarks.ddp_overhead",
        "--worker",
        "--repetitions",
        str(args.repetitions),
        "--steps",
        str(args.steps),
    ]
    if not args.fabric:
        cmd.append("--no-fabric")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run(cmd, env=env, check=False).returncode


if __name__ == "__main__":
    sys.exit(main())
