"""Per-step overhead, one process: a raw PyTorch loop, the same loop through
``trainspec.reference.Runner`` + ``SingleDeviceStrategy``, and through Lightning Fabric.

Same model, data, seed and optimizer; interleaved repetitions; the paired ratio to raw per
row. Rows: a tiny MLP (overhead-bound) and a wider MLP (compute-bound), for ``32-true`` and
``bf16-mixed``. Target: trainspec <= 1.03x raw in every row, and faster than Fabric.
Peak RSS of each variant is measured in a fresh subprocess running that variant alone.

    python -m benchmarks.step_overhead [--repetitions 25] [--steps 200] [--smoke]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
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


def make_model(model: str) -> tuple[nn.Module, torch.Tensor, torch.Tensor]:
    d_in, hidden, d_out, batch = MODELS[model]
    torch.manual_seed(0)
    module = nn.Sequential(nn.Linear(d_in, hidden), nn.ReLU(), nn.Linear(hidden, d_out))
    x = torch.randn(batch, d_in)
    y = torch.randn(batch, d_out)
    return module, x, y


StepLoop = Callable[[int], float]


def raw_loop(model: str, flag: str) -> StepLoop:
    module, x, y = make_model(model)
    optimizer = torch.optim.SGD(module.parameters(), lr=1e-3)
    loss_fn = nn.MSELoss()

    def context() -> AbstractContextManager[object]:
        if flag == "bf16-mixed":
            return torch.autocast("cpu", dtype=torch.bfloat16)
        return nullcontext()

    def run(steps: int) -> float:
        start = time.perf_counter()
        for _ in range(steps):
            with context():
                loss = loss_fn(module(x), y)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        return (time.perf_counter() - start) / steps

    return run


def trainspec_loop(model: str, flag: str) -> StepLoop:
    from trainspec.reference.precisions import precision_for_flag
    from trainspec.reference.runner import Runner
    from trainspec.reference.strategies.single_device import SingleDeviceStrategy

    runner = Runner(SingleDeviceStrategy(precision=precision_for_flag(flag)))
    module, x, y = make_model(model)
    module, optimizer = runner.setup(module, torch.optim.SGD(module.parameters(), lr=1e-3))
    x, y = runner.to_device((x, y))
    loss_fn = nn.MSELoss()

    def run(steps: int) -> float:
        start = time.perf_counter()
        for _ in range(steps):
            with runner.autocast():
                loss = loss_fn(module(x), y)
            runner.backward(loss, module)
            runner.step(optimizer)
        return (time.perf_counter() - start) / steps

    return run


def fabric_loop(model: str, flag: str) -> StepLoop:
    from lightning.fabric import Fabric

    fabric = Fabric(accelerator="cpu", devices=1, precision=flag)  # type: ignore[arg-type]
    module, x, y = make_model(model)
    module, optimizer = fabric.setup(module, torch.optim.SGD(module.parameters(), lr=1e-3))
    x, y = fabric.to_device((x, y))
    loss_fn = nn.MSELoss()

    def run(steps: int) -> float:
        start = time.perf_counter()
        for _ in range(steps):
            loss = loss_fn(module(x), y)
            fabric.backward(loss)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        return (time.perf_counter() - start) / steps

    return run


VARIANTS: dict[str, Callable[[str, str], StepLoop]] = {
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
    parser.add_argument("--repetitions", type=int, default=25)
    parser.add_argument("--steps", type=int, default=200, help="steps per repetition")
    parser.add_argument("--smoke", action="store_true", help="few steps, no RSS subprocesses")
    parser.add_argument("--rss-child", nargs=4, metavar=("VARIANT", "MODEL", "FLAG", "STEPS"))
    args = parser.parse_args(argv)
    if args.rss_child:
        variant, model, flag, steps = args.rss_child
        VARIANTS[variant](model, flag)(int(steps))
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
    print(f"{args.repetitions} interleaved repetitions x {args.steps} steps\n")
    rows = []
    for model in MODELS:
        for flag in FLAGS:
            loops = {name: make(model, flag) for name, make in variants.items()}
            # The wide model's steps are ~100x longer: fewer of them keep the run short.
            steps = args.steps if model == "tiny MLP" else max(args.steps // 10, 2)
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
