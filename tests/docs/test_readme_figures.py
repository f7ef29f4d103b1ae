"""Figures the README states about the spec stay true."""

from __future__ import annotations

import re
from pathlib import Path

from trainspec.conformance.clauses import CLAUSES

README = Path(__file__).resolve().parents[2] / "README.md"


def test_the_readme_counts_the_specs_clauses() -> None:
    stated = re.search(r"normative specification \((\d+) clauses\)", README.read_text())
    assert stated is not None
    assert int(stated.group(1)) == len(CLAUSES)
