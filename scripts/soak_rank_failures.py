"""Soak the reference launchers with hung and dying DDP ranks, and tabulate what happened.

Each trial is one real two-rank gloo run of ``Runner(DDPStrategy(...)).launch(fn)`` with a
random case from ``tests/reliability/rank_scenarios.py``: a launcher (``spawn``, from this
process, or ``subprocess``, a script re-run in a new Python), a fault of the culprit rank
(``hang``, ``exit``, ``segv``, ``raise``) just before ``all_reduce`` or ``barrier``, and the
culprit (rank 0 or 1; the script launcher only with rank 1, since its rank 0 is the launching
process itself). Every culprit starts a helper process first.

For each scenario (launcher, fault, culprit) the table counts the trials, the *correct
reports* (LaunchError naming the culprit, a message saying how it failed, the survivor's
collective raising CollectiveTimeoutError or PeerFailureError), the launches that returned
within the bound after the fault, and the trials that left rank processes or the culprit's
helper behind. Leftovers are killed after each trial so that they do not pile up.

``--kit-trials N`` adds N trials of the conformance kit's own world
(``rank_scenarios.run_kit_signal_case``): a script drives ``World(2)`` while rank 1 hangs in C
code holding the GIL, and gets a random SIGTERM (a CI runner's timeout), SIGINT (Ctrl-C) or
SIGKILL; a second table counts, per signal, the trials that left a rank or the
multiprocessing resource tracker behind.

Usage::

    python scripts/soak_rank_failures.py --trials 30 [--seed 0] [--launchers spawn,subprocess]
        [--faults hang,exit,segv,raise] [--kit-trials 10] [--json]

Exit status: 0 when every trial kept every guarantee, 1 otherwise (the tables say which).
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import signal
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import TYPE_CHECKING

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "reliability"))

import rank_scenarios as rs

if TYPE_CHECKING:
    from collections.abc import Sequence

_CHECKS = ("launch_error", "blame", "message", "survivor")
_COLUMNS = (
    "scenario",
    "trials",
    "correct reports",
    "wrong blame",
    "within bound",
    "max s after fault",
    "ranks left",
    "helper left",
)


def _cases(
    rng: random.Random, trials: int, launchers: Sequence[str], faults: Sequence[str]
) -> list[rs.Case]:
    choices = [
        rs.Case(fault, culprit, operation, launch)  # type: ignore[arg-type]
        for launch in launchers
        for fault in faults
        for culprit in ((0, 1) if launch == "spawn" else (1,))
        for operation in rs.OPERATIONS
    ]
    return [rng.choice(choices) for _ in range(trials)]


def _scenario(case: rs.Case) -> str:
    return f"{case.launch}:{case.fault}@rank{case.culprit}"


def _run(case: rs.Case, workdir: Path) -> rs.Outcome:
    try:
        if case.launch == "spawn":
            return rs.run_spawn_case(case, workdir)
        return rs.run_script_case(case, workdir)
    except AssertionError as error:  # the script hung or printed no result
        return rs.Outcome(case=case, error_type="harness", message=str(error))


def _row(scenario: str, outcomes: list[rs.Outcome]) -> dict[str, object]:
    found = [rs.problems(outcome) for outcome in outcomes]
    after = [o.after_fault_s for o in outcomes if o.after_fault_s is not None]
    return {
        "scenario": scenario,
        "trials": len(outcomes),
        "correct reports": sum(not any(check in f for check in _CHECKS) for f in found),
        "wrong blame": sum("blame" in f for f in found),
        "within bound": sum("time" not in f for f in found),
        "max s after fault": round(max(after), 1) if after else None,
        "ranks left": sum("ranks_left" in f for f in found),
        "helper left": sum("helper_left" in f for f in found),
    }


def _table(rows: list[dict[str, object]], columns: Sequence[str] = _COLUMNS) -> str:
    cells = [[str(row[column]) for column in columns] for row in rows]
    widths = [max(len(column), *(len(c[i]) for c in cells)) for i, column in enumerate(columns)]
    lines = [" | ".join(column.ljust(width) for column, width in zip(columns, widths, strict=True))]
    lines.append("-+-".join("-" * width for width in widths))
    for row_cells in cells:
        lines.append(
            " | ".join(cell.ljust(width) for cell, width in zip(row_cells, widths, strict=True))
        )
    return "\n".join(lines)


_KIT_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGKILL)


def _kit_rows(rng: random.Random, trials: int, root: Path) -> list[dict[str, object]]:
    """``trials`` kit-world trials with a random signal each; one row per signal."""
    counts: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
    for number in range(trials):
        signum = rng.choice(_KIT_SIGNALS)
        workdir = root / f"kit-{number}"
        workdir.mkdir(parents=True)
        row = counts[signum.name]
        row[0] += 1
        try:
            outcome = rs.run_kit_signal_case(signum, workdir)
        except RuntimeError as error:  # the world never reached the hang
            row[2] += 1
            verdict = f"not run: {error}"
        else:
            row[1] += bool(outcome.leftover)
            verdict = f"left {outcome.leftover}" if outcome.leftover else "ok"
        print(f"[kit {number + 1}/{trials}] {signum.name}: {verdict}", file=sys.stderr, flush=True)
    return [
        {"signal": name, "trials": row[0], "left processes": row[1], "not run": row[2]}
        for name, row in sorted(counts.items())
    ]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--trials", type=int, default=0, help="number of launches")
    parser.add_argument(
        "--kit-trials", type=int, default=0, help="number of kit-world signal trials"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--launchers", default="spawn,subprocess")
    parser.add_argument("--faults", default=",".join(rs.FAULTS))
    parser.add_argument("--json", action="store_true", help="also print one JSON line")
    options = parser.parse_args(argv)
    launchers = [item for item in options.launchers.split(",") if item]
    faults = [item for item in options.faults.split(",") if item]
    unknown = sorted({*launchers} - {"spawn", "subprocess"} | {*faults} - {*rs.FAULTS})
    if (
        options.trials < 0
        or options.kit_trials < 0
        or options.trials + options.kit_trials < 1
        or unknown
        or not launchers
        or not faults
    ):
        parser.error(
            f"--trials and --kit-trials must be >= 0, one of them >= 1; unknown launchers or "
            f"faults: {unknown}"
        )
    cases = _cases(random.Random(options.seed), options.trials, launchers, faults)
    by_scenario: dict[str, list[rs.Outcome]] = defaultdict(list)
    root = Path(tempfile.mkdtemp(prefix="soak-rank-failures-"))
    started = time.monotonic()
    kit: list[dict[str, object]] = []
    try:
        kit = _kit_rows(random.Random(options.seed), options.kit_trials, root)
        for number, case in enumerate(cases):
            outcome = _run(case, root / f"trial-{number}")
            # What a trial left behind is counted in its outcome; do not let it pile up.
            rs.kill_marked(outcome.marker)
            by_scenario[_scenario(case)].append(outcome)
            found = rs.problems(outcome)
            details = "".join(f"\n    {name}: {text[:300]}" for name, text in found.items())
            print(
                f"[{number + 1}/{len(cases)}] {case.name}: {','.join(found) or 'ok'} "
                f"({outcome.after_fault_s or 0:.1f} s after the fault){details}",
                file=sys.stderr,
                flush=True,
            )
    finally:
        shutil.rmtree(root, ignore_errors=True)
    rows = [_row(name, by_scenario[name]) for name in sorted(by_scenario)]
    total = _row("all", [o for outcomes in by_scenario.values() for o in outcomes])
    if options.trials:
        print(_table([*rows, total]))
    if kit:
        print(_table(kit, ("signal", "trials", "left processes", "not run")))
    elapsed = time.monotonic() - started
    print(
        f"{options.trials} launcher trials and {options.kit_trials} kit trials in "
        f"{elapsed:.0f} s; bound after the fault: "
        f"{rs.time_bound():g} s (collective timeout {rs.COLLECTIVE_TIMEOUT_S:g} s, grace "
        f"{rs.GRACE_PERIOD_S:g} s x 2, slack {rs.SLACK_S:g} s)"
    )
    if options.json:
        print(json.dumps({"rows": rows, "total": total, "kit": kit, "seconds": round(elapsed, 1)}))
    kept = (
        total["correct reports"] == total["within bound"] == total["trials"]
        and total["ranks left"] == total["helper left"] == 0
        and not any(row["left processes"] or row["not run"] for row in kit)
    )
    return 0 if kept else 1


if __name__ == "__main__":
    sys.exit(main())
