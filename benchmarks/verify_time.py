"""Kit run time: ``trainspec verify`` (the built-in matrix) end to end, and the time spent per
kind, per layer and per target, from its JSON report. Target: under 60 s on a 2-core machine,
and no growth apart from new rows (issue 15).

    python -m benchmarks.verify_time [--repetitions 1]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict

from benchmarks._common import machine_description, markdown_table


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repetitions", type=int, default=1)
    parser.add_argument("--smoke", action="store_true", help="verify one small kind only")
    args = parser.parse_args(argv)
    walls: list[float] = []
    report: dict[str, object] = {}
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "report.json")
        command = [sys.executable, "-m", "trainspec.conformance.cli", "verify"]
        if args.smoke:
            command.append("cluster_environment")
        command += ["--quiet", "--json", out]
        for _ in range(args.repetitions):
            start = time.perf_counter()
            done = subprocess.run(command, check=False, capture_output=True, text=True)
            walls.append(time.perf_counter() - start)
            if done.returncode not in (0, 1):
                print(done.stderr, file=sys.stderr)
                return done.returncode
            with open(out) as f:
                report = json.load(f)
    per_layer: dict[str, float] = defaultdict(float)
    per_kind: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    per_target: list[list[object]] = []
    targets = report.get("targets", [])
    assert isinstance(targets, list)
    for target in targets:
        per_target.append(
            [
                f"{target['kind']}: {target['name']}",
                f"{target['duration_s']:.1f}",
                "passed" if target["ok"] else "FAILED",
            ]
        )
        per_kind[target["kind"]][0] += 1
        per_kind[target["kind"]][1] += float(target["duration_s"])
        for result in target["results"]:
            per_layer[result["layer"]] += float(result["duration_s"])
    print(f"Machine: {machine_description()}\n")
    print(
        markdown_table(
            ["command", "wall s (median)", "targets", "ok"],
            [
                [
                    "trainspec verify" + (" cluster_environment" if args.smoke else ""),
                    f"{statistics.median(walls):.1f}",
                    len(targets),
                    report.get("ok"),
                ]
            ],
        )
    )
    print()
    print(
        markdown_table(
            ["kind", "targets", "check time s"],
            [[k, int(n), f"{s:.1f}"] for k, (n, s) in per_kind.items()],
        )
    )
    print()
    print(
        markdown_table(
            ["layer", "check time s"], [[k, f"{v:.1f}"] for k, v in sorted(per_layer.items())]
        )
    )
    print()
    print(markdown_table(["target", "s", "result"], per_target))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
