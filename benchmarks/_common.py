"""Shared measurement helpers: interleaved repetitions, medians, paired ratios, peak RSS.

Every benchmark measures its variants side by side in one run: repetition *i* of every variant
runs before repetition *i+1* of any, so machine drift hits all variants alike, and ratios are
taken per repetition (paired) before the median.
"""

from __future__ import annotations

import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

__all__ = [
    "Measurement",
    "interleaved",
    "machine_description",
    "markdown_table",
    "ratio_rows",
    "peak_rss_mib",
    "run_json_subprocess",
]


@dataclass(frozen=True)
class Measurement:
    """Per-repetition samples (seconds per unit) of one variant."""

    name: str
    samples: tuple[float, ...]

    @property
    def median(self) -> float:
        return statistics.median(self.samples)

    def paired_ratio(self, baseline: Measurement) -> float:
        """Median of the per-repetition ratios self/baseline."""
        return statistics.median(
            a / b for a, b in zip(self.samples, baseline.samples, strict=False)
        )


def interleaved(
    variants: Mapping[str, Callable[[], float]], repetitions: int, warmup: int = 1
) -> dict[str, Measurement]:
    """Run each variant ``warmup`` times, then ``repetitions`` rounds of all variants.

    A variant returns the seconds per unit it measured (e.g. per step).
    """
    for _ in range(warmup):
        for fn in variants.values():
            fn()
    samples: dict[str, list[float]] = {name: [] for name in variants}
    order = list(variants)
    for rep in range(repetitions):
        # Rotate the order so no variant always runs first (cache/thermal position effects).
        rotated = order[rep % len(order) :] + order[: rep % len(order)]
        for name in rotated:
            samples[name].append(variants[name]())
    return {name: Measurement(name, tuple(values)) for name, values in samples.items()}


def peak_rss_mib() -> float:
    """Peak resident set size of this process in MiB.

    Read from ``VmHWM`` in ``/proc/self/status``: ``getrusage``'s ``ru_maxrss`` survives
    ``execve``, so in a child started by a large parent it reports the parent's peak.
    """
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def run_json_subprocess(args: Sequence[str], env: Mapping[str, str] | None = None) -> object:
    """Run ``python args...`` and parse the last stdout line as JSON."""
    out = subprocess.run(
        [sys.executable, *args],
        check=True,
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
    ).stdout
    return json.loads(out.strip().splitlines()[-1])


def machine_description() -> str:
    import torch

    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return (
        f"{cpu}, {os.cpu_count()} cores, Python {platform.python_version()}, "
        f"torch {torch.__version__}, torch threads {torch.get_num_threads()}"
    )


def ratio_rows(
    measured: Mapping[str, Measurement], baseline: str, scale: float = 1e6, digits: int = 3
) -> list[list[object]]:
    """One row per variant: name, median (seconds x ``scale``), paired ratio to ``baseline``."""
    base = measured[baseline]
    return [
        [name, f"{m.median * scale:.1f}", f"{m.paired_ratio(base):.{digits}f}"]
        for name, m in measured.items()
    ]


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in rows:
        lines.append("| " + " | ".join(str(c) for c in row) + " |")
    return "\n".join(lines)


def timer() -> float:
    return time.perf_counter()
