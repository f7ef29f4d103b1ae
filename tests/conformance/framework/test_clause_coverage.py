"""Every spec clause has at least one conformance check, and every check names a clause."""

from __future__ import annotations

import importlib

from trainspec.conformance.clauses import CLAUSES
from trainspec.conformance.core import Check, all_checks


def _every_check() -> list[Check]:
    # The distributed and end-to-end checks register when their package is imported.
    importlib.import_module("trainspec.conformance.distributed.checks")
    from trainspec.conformance.core import _REGISTRY

    checks = {c.name: c for c in all_checks()}
    checks.update(_REGISTRY)
    return list(checks.values())


def test_every_clause_has_a_check() -> None:
    covered = {c.clause for c in _every_check()}
    missing = [clause for clause in CLAUSES if clause not in covered]
    assert not missing, f"clauses without a conformance check: {missing}"


def test_every_check_names_a_clause_of_the_spec() -> None:
    unknown = sorted({c.clause for c in _every_check()} - set(CLAUSES))
    assert not unknown, f"checks naming clauses that docs/spec.md does not have: {unknown}"
