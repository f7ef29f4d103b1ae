#!/usr/bin/env python
"""Fuzz trainspec's configuration input: no bad input crashes, hangs or hides the choices.

Runs every target of ``tests/reliability/_fuzz_inputs.py`` (``resolve``, ``parse_devices`` on
every reference accelerator, the accelerator constructors, ``precision_for_flag``, precision
``load_state_dict``, the cluster environments under arbitrary environment variables, the
``trainspec`` command line, and ``trainspec demo`` runs with hostile numbers that reach
training) with hypothesis, ``--examples`` examples each, and checks every
outcome against the rule in that module's docstring: success, or a trainspec error of the
allowed kind whose message names a valid choice, within the watchdog's deadline.

Failing examples do not stop a target: every one is recorded, grouped by signature (target,
kind of violation, error type, the line that raised), and the shortest reproducer of each group
is printed. Known bugs (``KNOWN_BUGS``) are counted in their own column.

Usage::

    python scripts/fuzz_configuration.py --examples 10000
    python scripts/fuzz_configuration.py --examples 500 --targets resolve,cli --seed 7

Exit status: 0 no failure, 1 a failure (a known bug counts unless ``--ignore-known``), 2 a
usage error.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from hypothesis import HealthCheck, Phase, given, seed, settings

if TYPE_CHECKING:
    from types import ModuleType

HELPERS = Path(__file__).resolve().parent.parent / "tests" / "reliability" / "_fuzz_inputs.py"


def load_helpers() -> ModuleType:
    """``tests/reliability/_fuzz_inputs.py``, registered under its ``MODULE_NAME``."""
    name = "trainspec_tests_fuzz_inputs"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, HELPERS)
    if spec is None or spec.loader is None:
        raise SystemExit(f"cannot load {HELPERS}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@dataclasses.dataclass
class TargetResult:
    """What one target's run found."""

    name: str
    examples: int = 0
    failing_examples: int = 0
    seconds: float = 0.0
    groups: dict[tuple[str, str, str, str], list[object]] = dataclasses.field(default_factory=dict)
    known: dict[tuple[str, str, str, str], str] = dataclasses.field(default_factory=dict)

    @property
    def distinct(self) -> int:
        return len(self.groups)

    @property
    def distinct_known(self) -> int:
        return len(self.known)


def fuzz_target(
    helpers: ModuleType, target: object, *, examples: int, seed_value: int, timeout_s: float
) -> TargetResult:
    """Run ``examples`` examples of ``target`` and record every finding."""
    result = TargetResult(name=target.name)  # type: ignore[attr-defined]

    @settings(
        max_examples=examples,
        deadline=None,  # the watchdog bounds each call instead: no deadline flakiness
        database=None,
        derandomize=False,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @seed(seed_value)
    @given(target.calls())  # type: ignore[attr-defined]
    def run(call: object) -> None:
        result.examples += 1
        finding = helpers.check_call(call, timeout_s=timeout_s)
        if finding is None:
            return
        result.failing_examples += 1
        result.groups.setdefault(finding.signature, []).append(finding)
        for bug in helpers.KNOWN_BUGS:
            if bug.matches(finding):
                result.known[finding.signature] = bug.id
                break

    start = time.perf_counter()
    with target.context():  # type: ignore[attr-defined]
        run()
    result.seconds = time.perf_counter() - start
    return result


def print_table(results: list[TargetResult]) -> None:
    header = (
        "target",
        "examples",
        "failing examples",
        "distinct failures",
        "of them known",
        "seconds",
    )
    rows = [
        (
            r.name,
            str(r.examples),
            str(r.failing_examples),
            str(r.distinct),
            str(r.distinct_known),
            f"{r.seconds:.0f}",
        )
        for r in results
    ]
    total = (
        "total",
        str(sum(r.examples for r in results)),
        str(sum(r.failing_examples for r in results)),
        str(sum(r.distinct for r in results)),
        str(sum(r.distinct_known for r in results)),
        f"{sum(r.seconds for r in results):.0f}",
    )
    widths = [max(len(row[i]) for row in (header, *rows, total)) for i in range(len(header))]

    def line(cells: tuple[str, ...]) -> str:
        return " | ".join(
            c.ljust(w) if i == 0 else c.rjust(w)
            for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        )

    print(line(header))
    print("-+-".join("-" * w for w in widths))
    for row in rows:
        print(line(row))
    print("-+-".join("-" * w for w in widths))
    print(line(total))


def print_findings(results: list[TargetResult]) -> None:
    for result in results:
        for signature, findings in result.groups.items():
            shortest = min(findings, key=lambda f: len(f.reproducer))  # type: ignore[attr-defined]
            known = result.known.get(signature)
            tag = f"known bug {known}" if known else "NEW"
            print(f"\n({tag}; {len(findings)} examples) {shortest.report()}")  # type: ignore[attr-defined]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument(
        "--examples", type=int, default=10_000, help="examples per target (default 10000)"
    )
    parser.add_argument("--targets", default="", help="comma-separated target names (default: all)")
    parser.add_argument(
        "--seed", type=int, default=20_240_601, help="hypothesis seed (default 20240601)"
    )
    parser.add_argument(
        "--timeout", type=float, default=30.0, help="watchdog seconds per call (default 30)"
    )
    parser.add_argument(
        "--ignore-known", action="store_true", help="exit 0 when only known bugs are found"
    )
    args = parser.parse_args(argv)
    if args.examples < 1 or args.timeout <= 0:
        parser.error("--examples and --timeout must be positive")

    helpers = load_helpers()
    names = [n.strip() for n in args.targets.split(",") if n.strip()] or [
        t.name for t in helpers.TARGETS
    ]
    unknown = [n for n in names if n not in helpers.TARGETS_BY_NAME]
    if unknown:
        parser.error(f"unknown target {unknown[0]!r}; valid: {', '.join(helpers.TARGETS_BY_NAME)}")

    print(
        f"fuzzing {len(names)} targets, {args.examples} examples each, seed {args.seed}, "
        f"watchdog {args.timeout:g} s per call",
        flush=True,
    )
    results = []
    for name in names:
        result = fuzz_target(
            helpers,
            helpers.TARGETS_BY_NAME[name],
            examples=args.examples,
            seed_value=args.seed,
            timeout_s=args.timeout,
        )
        print(
            f"  {name}: {result.examples} examples, {result.distinct} distinct failures, "
            f"{result.seconds:.0f} s",
            flush=True,
        )
        results.append(result)
    print()
    print_table(results)
    print_findings(results)
    new = sum(r.distinct - r.distinct_known for r in results)
    known = sum(r.distinct_known for r in results)
    if new or (known and not args.ignore_known):
        print(f"\nFAILED: {new} new and {known} known distinct failures", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
