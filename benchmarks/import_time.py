"""Import cost: ``import trainspec`` (must not import torch; target <= 50 ms) next to
``import lightning.fabric``. Each import is measured in a fresh interpreter, interleaved.

    python -m benchmarks.import_time [--repetitions N]
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import subprocess
import sys

from benchmarks._common import markdown_table

PROBE = (
    "import sys,time;t=time.perf_counter();import {module};"
    "print(time.perf_counter()-t, 'torch' in sys.modules)"
)


def measure(module: str) -> tuple[float, bool]:
    out = subprocess.run(
        [sys.executable, "-c", PROBE.format(module=module)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    return float(out[0]), out[1] == "True"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repetitions", type=int, default=7)
    parser.add_argument("--smoke", action="store_true", help="one repetition")
    args = parser.parse_args(argv)
    if args.smoke:
        args.repetitions = 1
    modules = ["trainspec", "torch"]
    if importlib.util.find_spec("lightning") is not None:
        modules.append("lightning.fabric")
    samples: dict[str, list[float]] = {m: [] for m in modules}
    torch_loaded: dict[str, bool] = {}
    for _ in range(args.repetitions):
        for m in modules:
            seconds, loaded = measure(m)
            samples[m].append(seconds)
            torch_loaded[m] = loaded
    rows = [
        [f"`import {m}`", f"{statistics.median(samples[m]) * 1000:.1f}", torch_loaded[m]]
        for m in modules
    ]
    print(markdown_table(["import", "median ms", "imports torch"], rows))
    return 1 if torch_loaded["trainspec"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
