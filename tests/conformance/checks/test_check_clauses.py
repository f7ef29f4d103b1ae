"""Every registered check is filed under the clause whose text it decides (issue 15).

A check's clause ID is what a failure report quotes, what expected failures name and what the
coverage tests count; a check filed under the wrong clause reports a plugin as breaking a rule
it does not break. Two rules, both read from the spec (``docs/spec.md``), decide the filing:

1. *Subject*: when a check's rule name starts with a member of its protocol
   (``check_accelerator_synchronize_...``), that member is among the clause's subject members,
   unless the clause governs the whole protocol (``Collective``) or every protocol (``ERR-1``).
2. *Rule*: the check's name and docstring share words with its clause's title and text
   (title words count double), and no other clause of its prefix whose subject allows that
   member shares at least twice as many (the ACC-7 rule filed under ACC-9 scored 5 against
   ACC-7's 12).

The rules are heuristics over words, so checks that decide a bullet of their clause about a
member outside the clause's subject are listed in :data:`REVIEWED`, each with the reason a
person checked.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from trainspec.conformance.clauses import CLAUSES, Clause
from trainspec.conformance.core import Check, all_checks

SPEC = Path(__file__).resolve().parents[3] / "docs" / "spec.md"

_STOP = frozenset(
    """a an the of is are and or to in on with every each must be it its as for from that this
    no not by at after before into one any all than then their there when where which while who
    returns return same raises raise may should decided""".split()
)

REVIEWED: dict[str, str] = {
    "check_precision_forward_context_computes_in_compute_dtype": "PREC-1's bullet: inside "
    "forward_context a matmul of param_dtype tensors produces compute_dtype",
    "check_precision_forward_context_enables_autocast_in_compute_dtype": "PREC-1's compute "
    "dtype, as an autocast flag declares it; restoring the state on exit is PREC-6's check",
}
"""Checks whose filing a person reviewed because the word heuristic of rule 2 misjudges it."""


def _words(text: str) -> set[str]:
    words = re.findall(r"[a-z0-9]+", text.lower().replace("_", " "))
    return {w[:5] for w in words if w not in _STOP and len(w) > 2}


def _bodies() -> dict[str, str]:
    spec = SPEC.read_text(encoding="utf-8")
    pattern = r"^### ([A-Z0-9]+-\d+) — .*?\n(.*?)(?=^##|\Z)"
    return {m.group(1): m.group(2) for m in re.finditer(pattern, spec, re.S | re.M)}


def _every_check() -> list[Check]:
    """Every check of every kind, the distributed ones included (by the kinds' listed
    modules: other test modules' ``checks_for`` is not affected)."""
    return sorted(all_checks(distributed=True), key=lambda c: c.name)


CHECKS = _every_check()
BODIES = _bodies()


def _rule_name(check: Check) -> str:
    """The check's name without ``check_<kind>_``: the rule it states."""
    return re.sub(
        r"^check_(async_checkpoint_io|checkpoint_io|cluster_environment|[a-z]+?)_", "", check.name
    )


def _short(member: str) -> str:
    return member.rsplit(".", 1)[-1]


def _protocol_wide(clause: Clause) -> bool:
    return not clause.members or any("." not in m for m in clause.members)


def _subject(check: Check, family: list[Clause]) -> str | None:
    """The protocol member the rule name starts with, if any (the longest that fits)."""
    name = _rule_name(check)
    members = {_short(m) for c in family for m in c.members if "." in m}
    starting = [m for m in members if name == m or name.startswith(m + "_")]
    return max(starting, key=len) if starting else None


def _filing_problem(check: Check) -> str | None:
    clause = CLAUSES[check.clause]
    family = [c for c in CLAUSES.values() if c.prefix == clause.prefix]
    subject = _subject(check, family)
    if subject is not None:
        allowed = [c for c in family if _protocol_wide(c) or subject in map(_short, c.members)]
        if clause not in allowed:
            return f"starts with {subject!r}, not a subject member of {clause.id} {clause.members}"
    else:
        allowed = family
    words = _words(_rule_name(check) + " " + check.doc)

    def score(c: Clause) -> int:
        return 2 * len(words & _words(c.title)) + len(words & _words(BODIES[c.id]))

    best = max(allowed, key=score)
    if score(clause) == 0:
        return f"shares no word with {clause.id} ({clause.title!r})"
    if score(best) >= 2 * score(clause):
        return (
            f"reads as {best.id} ({best.title!r}, score {score(best)}) more than as its "
            f"{clause.id} ({clause.title!r}, score {score(clause)})"
        )
    return None


def test_the_spec_bodies_cover_every_clause() -> None:
    assert set(BODIES) == set(CLAUSES)


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.name)
def test_every_check_is_filed_under_the_clause_whose_text_it_decides(check: Check) -> None:
    problem = _filing_problem(check)
    if check.name in REVIEWED:
        return
    assert problem is None, f"{check.name} ({check.clause}: {check.doc!r}) {problem}"


def test_reviewed_exceptions_are_still_needed_and_exist() -> None:
    names = {c.name for c in CHECKS}
    assert set(REVIEWED) <= names, sorted(set(REVIEWED) - names)
    stale = [n for n in REVIEWED if _filing_problem(next(c for c in CHECKS if c.name == n)) is None]
    assert not stale, f"no longer misjudged, drop from REVIEWED: {stale}"


@pytest.mark.parametrize(
    ("name", "clause", "doc"),
    [
        # The misfilings issue 15 reported: the ACC-7 rule filed under ACC-9 / ACC-10.
        (
            "check_accelerator_synchronize_refuses_another_device_type",
            "ACC-9",
            "synchronize() with a device of another type raises ConfigurationError.",
        ),
        (
            "check_accelerator_device_stats_refuse_another_device_type",
            "ACC-10",
            "get_device_stats() with a device of another type raises ConfigurationError.",
        ),
        # A member outside the clause's subject.
        ("check_accelerator_teardown_is_idempotent", "ACC-4", "teardown() twice does not raise."),
    ],
)
def test_the_rules_reject_a_misfiled_check(name: str, clause: str, doc: str) -> None:
    misfiled = Check(
        clause=clause,
        name=name,
        kind="accelerator",
        layer="behaviour",
        requires=frozenset(),
        func=lambda target: None,
        doc=doc,
    )
    assert _filing_problem(misfiled) is not None
