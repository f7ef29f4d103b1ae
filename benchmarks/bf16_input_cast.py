"""Why Lightning Fabric can beat a raw loop on the wide MLP with ``bf16-mixed``: Fabric's
mixed precision casts the batch to bfloat16 before the forward (its ``convert_input``), which
a raw loop and trainspec (PREC-4: inputs in the parameter dtype, float32) do not. This runs the
raw loop with a float32 batch, the raw loop with the batch cast to bfloat16 once up front, and
Fabric, interleaved on one shared module. A diagnostic for docs/benchmarks.md, not part of
``run_all``.

    python -m benchmarks.bf16_input_cast [--repetitions 100] [--steps 2]
"""

from __future__ import annotations

import argparse
import importlib.util

import torch

from benchmarks._common import interleaved, markdown_table, ratio_rows
from benchmarks.step_overhead import fabric_loop, make_model, raw_loop


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repetitions", type=int, default=100)
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--model", default="wide MLP")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    module, x, y = make_model(args.model)
    loops = {
        "raw, float32 batch": raw_loop((module, x, y), "bf16-mixed"),
        "raw, batch cast to bfloat16": raw_loop((module, x.bfloat16(), y), "bf16-mixed"),
    }
    if importlib.util.find_spec("lightning") is not None:
        loops["Fabric"] = fabric_loop((module, x, y), "bf16-mixed")
    measured = interleaved(
        {name: (lambda loop=loop: loop(args.steps)) for name, loop in loops.items()},
        args.repetitions,
    )
    rows = ratio_rows(measured, "raw, float32 batch")
    print(f"{args.model}, bf16-mixed, {args.repetitions} interleaved repetitions\n")
    print(markdown_table(["variant", "µs/step", "/ raw float32 batch"], rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
