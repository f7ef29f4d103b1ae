"""Run the benchmarks and write their output into ``docs/benchmarks.md``.

    python -m benchmarks.run_all                         # every benchmark (tens of minutes)
    python -m benchmarks.run_all --only checkpoint_io    # one (repeatable)
    python -m benchmarks.run_all --smoke                 # each script in smoke mode; writes nothing

Each benchmark's output lives in the page between ``<!-- run_all: MODULE -->`` and
``<!-- /run_all: MODULE -->``; a run replaces exactly those blocks (with the date, the machine
and the command) and keeps everything else, so hand-written analysis and notes stay put. A
benchmark with no block yet gets a new section at the end; a missing page is written whole.
"""

from __future__ import annotations

import argparse
import datetime
import subprocess
import sys
from pathlib import Path

from benchmarks._common import machine_description

BENCHMARKS: tuple[tuple[str, str, list[str]], ...] = (
    ("Step overhead, single process", "step_overhead", []),
    ("Step overhead, DDP on 2 gloo ranks", "ddp_overhead", []),
    ("FSDP on 2 gloo ranks: step, memory, sharded checkpoints", "fsdp_overhead", []),
    ("Checkpoint IO", "checkpoint_io", []),
    ("Import time", "import_time", []),
    ("Kit run time (`trainspec verify`)", "verify_time", []),
    ("Distributed harness", "distributed_harness", []),
)

INTRO = """# Benchmarks

Side-by-side measurements: each table's variants ran interleaved in one run of the committed
script, and ratios are paired per repetition. Targets come from the benchmark issue:
trainspec's per-step time <= 1.03x a raw PyTorch loop (and below Lightning Fabric), checkpoint
throughput >= 0.95x raw `torch.save`/`torch.load` with atomic writes, the async save's blocking
time <= 10% of a synchronous save, `import trainspec` <= 50 ms without torch, and
`trainspec verify` under 60 s. These are measurements, not tests: CI runs each script once in
`--smoke` mode to keep it working, with no time assertion. Blocks marked `run_all` are
written by `python -m benchmarks.run_all`; the text around them is hand-written.
"""


def _block(module: str, body: str) -> str:
    return f"<!-- run_all: {module} -->\n\n{body.strip()}\n\n<!-- /run_all: {module} -->"


def update_page(page: str, outputs: dict[str, str]) -> str:
    """``page`` with the block of each module in ``outputs`` replaced by its new body (a new
    section at the end for a module without a block); nothing else changes."""
    for title, module, _ in BENCHMARKS:
        if module not in outputs:
            continue
        start, end = f"<!-- run_all: {module} -->", f"<!-- /run_all: {module} -->"
        block = _block(module, outputs[module])
        if start in page and end in page.split(start, 1)[1]:
            before, rest = page.split(start, 1)
            page = before + block + rest.split(end, 1)[1]
        else:
            page = page.rstrip("\n") + f"\n\n## {title}\n\n{block}\n"
    return page


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--output", default="docs/benchmarks.md")
    parser.add_argument("--only", action="append", default=[], help="module name(s) to run")
    args = parser.parse_args(argv)
    known = [module for _, module, _ in BENCHMARKS]
    unknown = sorted(set(args.only) - set(known))
    if unknown:
        parser.error(f"unknown benchmark(s) {unknown}; choose from {', '.join(known)}")
    outputs: dict[str, str] = {}
    failed = False
    today = datetime.date.today().isoformat()
    for _, module, extra in BENCHMARKS:
        if args.only and module not in args.only:
            continue
        command = [sys.executable, "-m", f"benchmarks.{module}", *extra]
        if args.smoke:
            command.append("--smoke")
        print(f"::: {' '.join(command[1:])}", flush=True)
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        print(done.stdout, flush=True)
        if done.returncode != 0:
            failed = True
            print(done.stderr[-4000:], file=sys.stderr, flush=True)
            continue
        shown = " ".join(["python", *command[1:]])
        outputs[module] = (
            f"Command: `{shown}` (run on {today}: {machine_description()})\n\n"
            f"{done.stdout.strip()}\n"
        )
    if not args.smoke and outputs:
        output = Path(args.output)
        page = output.read_text(encoding="utf-8") if output.exists() else INTRO
        output.write_text(update_page(page, outputs), encoding="utf-8")
        print(f"updated {', '.join(outputs)} in {args.output}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
