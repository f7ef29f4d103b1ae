"""Run every benchmark once and write ``docs/benchmarks.md`` from their output.

    python -m benchmarks.run_all            # full run (tens of minutes on 2 cores)
    python -m benchmarks.run_all --smoke    # each script in smoke mode; writes nothing

Every figure in docs/benchmarks.md comes from one run of this command.
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
`--smoke` mode to keep it working, with no time assertion.

"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--output", default="docs/benchmarks.md")
    parser.add_argument("--only", action="append", default=[], help="module name(s) to run")
    args = parser.parse_args(argv)
    sections: list[str] = []
    failed = False
    for title, module, extra in BENCHMARKS:
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
        sections.append(f"## {title}\n\nCommand: `{shown}`\n\n{done.stdout.strip()}\n")
    if not args.smoke and not args.only:
        today = datetime.date.today().isoformat()
        header = (
            f"{INTRO}Run on {today}: {machine_description()}. "
            "Command: `python -m benchmarks.run_all`.\n\n"
        )
        Path(args.output).write_text(header + "\n".join(sections))
        print(f"wrote {args.output}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
