"""docs/spec.md, its machine-readable mirror (trainspec.conformance.clauses) and the clause IDs
cited in the protocols' docstrings all agree."""

from __future__ import annotations

import ast
import importlib.util
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

import trainspec
from trainspec.conformance.clauses import CLAUSES, SPEC_VERSION, Clause, clause

if TYPE_CHECKING:
    from collections.abc import Iterator
    from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]
SPEC = ROOT / "docs" / "spec.md"
GENERATOR = ROOT / "scripts" / "gen_clauses.py"
CLAUSES_MODULE = ROOT / "conformance_tests" / "clauses.py"
INTERFACES = ROOT / "interfaces"

# The agreed clause IDs: prefix -> highest number (IDs run from 1 without gaps).
AGREED = {
    "ACC": 10,
    "PREC": 12,
    "CKPT": 14,
    "ACKPT": 5,
    "COLL": 16,
    "ENV": 6,
    "LAUNCH": 4,
    "STRAT": 17,
    "SYNC": 1,
    "SHARD": 1,
    "LAYOUT": 1,
    "STEP": 1,
    "E2E": 3,
    "ERR": 1,
    "DCKPT": 7,
}
ID_TOKEN = re.compile(r"\b([A-Z][A-Z0-9]*)-(\d+)\b")
ID_RANGE = re.compile(r"\b([A-Z][A-Z0-9]*)-(\d+)\s*(?:\.\.\.|…|\.\.)\s*\1-(\d+)\b")
KEYWORD = re.compile(r"\b(MUST|SHALL|SHOULD|REQUIRED|RECOMMENDED|MAY|OPTIONAL)\b")


@pytest.fixture(scope="module")
def generator() -> Iterator[ModuleType]:
    """scripts/gen_clauses.py, loaded by path (scripts/ is not a package)."""
    spec = importlib.util.spec_from_file_location("trainspec_gen_clauses", GENERATOR)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve their module through sys.modules
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        del sys.modules[spec.name]


def test_clauses_module_is_generated_from_the_current_spec(generator: ModuleType) -> None:
    expected = generator.generate(SPEC)
    assert CLAUSES_MODULE.read_text(encoding="utf-8") == expected, (
        "conformance_tests/clauses.py is out of date with docs/spec.md; "
        "run: python scripts/gen_clauses.py"
    )


def test_clause_ids_are_exactly_the_agreed_ids_in_spec_order() -> None:
    expected = [f"{prefix}-{n}" for prefix, top in AGREED.items() for n in range(1, top + 1)]
    assert list(CLAUSES) == expected


def test_clause_records_are_consistent() -> None:
    for clause_id, record in CLAUSES.items():
        assert isinstance(record, Clause)
        assert record.id == clause_id
        assert record.prefix == clause_id.rsplit("-", 1)[0]
        assert record.title and record.title == record.title.strip()
        assert KEYWORD.search(record.text), f"{clause_id}: first sentence is not normative"


def test_spec_version_matches_the_protocols() -> None:
    assert SPEC_VERSION == trainspec.SPEC_VERSION


def test_clause_lookup_returns_the_clause() -> None:
    assert clause("CKPT-3") is CLAUSES["CKPT-3"]
    assert clause("CKPT-3").members == ("CheckpointIO.save_checkpoint",)


@pytest.mark.parametrize(
    ("unknown", "suggestion"), [("ckpt-3", "CKPT-3"), ("ACC-11", "ACC-1"), ("NOPE-1", None)]
)
def test_clause_lookup_of_an_unknown_id_raises_keyerror_naming_the_known_ids(
    unknown: str, suggestion: str | None
) -> None:
    with pytest.raises(KeyError) as raised:
        clause(unknown)
    message = str(raised.value)
    assert repr(unknown) in message and "ACC-1..10" in message and "docs/spec.md" in message
    if suggestion is not None:
        assert f"did you mean {suggestion}" in message


VALID_CLAUSE = """This is version **1.0** of the specification.

### ACC-1 — Accelerator.device_type: the device type is constant

`device_type` **MUST** be constant. More text.
"""


@pytest.mark.parametrize(
    ("broken", "complaint"),
    [
        (VALID_CLAUSE.replace(" — ", " - "), "does not match"),
        (VALID_CLAUSE.replace("device_type: the", "device_type the"), "does not match"),
        (VALID_CLAUSE.replace("Accelerator.device_type:", "accelerator device type:"), "subject"),
        (VALID_CLAUSE.replace("**MUST** be", "is"), "RFC 2119"),
        (VALID_CLAUSE.replace("ACC-1", "ACC-2"), "out of sequence"),
        (VALID_CLAUSE + VALID_CLAUSE.split("\n", 1)[1], "already defined"),
        (VALID_CLAUSE.replace("version **1.0**", "version 1.0"), "version"),
    ],
)
def test_the_generator_refuses_a_malformed_spec(
    generator: ModuleType, broken: str, complaint: str
) -> None:
    assert generator.parse_spec(VALID_CLAUSE)[1][0].text == "`device_type` MUST be constant."
    with pytest.raises(generator.SpecFormatError, match=complaint):
        generator.parse_spec(broken)


@pytest.mark.parametrize(
    ("paragraph", "sentence"),
    [
        ("A **MUST** hold, e.g. here. Then more.", "A MUST hold, e.g. here."),
        ("`x.y` **MUST** be `a. B` exactly. `z` follows.", "`x.y` MUST be `a. B` exactly."),
        ("See [the terms](#15-terms) and *i* **MAY** vary.", "See the terms and i MAY vary."),
        ("`f(*args, **kwargs)` **MUST** run.", "`f(*args, **kwargs)` MUST run."),
    ],
)
def test_the_generator_takes_the_first_sentence_as_plain_text(
    generator: ModuleType, paragraph: str, sentence: str
) -> None:
    text = VALID_CLAUSE.replace("`device_type` **MUST** be constant. More text.", paragraph)
    assert generator.parse_spec(text)[1][0].text == sentence


def test_the_generator_output_round_trips_through_python(generator: ModuleType) -> None:
    """Rendered literals (quotes, backslashes, wrapped lines) evaluate back to the same text."""
    tricky = generator.ParsedClause(
        id="ACC-1",
        title="quotes \" and ' and \\ backslash",
        members=("Accelerator.device_type",),
        text=" ".join(['`"cuda"` **MUST** hold'] * 20),
    )
    namespace: dict[str, object] = {}
    exec(compile(generator.render("9.9", [tricky]), "<clauses>", "exec"), namespace)
    rendered = namespace["CLAUSES"]["ACC-1"]  # type: ignore[index]
    assert (rendered.title, rendered.text, rendered.members) == (
        tricky.title,
        tricky.text,
        tricky.members,
    )
    assert max(map(len, generator.render("9.9", [tricky]).splitlines())) <= 100


def _cited(docstring: str | None) -> set[str]:
    """Clause IDs a docstring cites, with ranges such as ``ACC-1 ... ACC-10`` expanded."""
    text = docstring or ""
    ids = {f"{prefix}-{number}" for prefix, number in ID_TOKEN.findall(text)}
    for prefix, first, last in ID_RANGE.findall(text):
        ids.update(f"{prefix}-{n}" for n in range(int(first), int(last) + 1))
    return ids


def _docstring_citations() -> list[tuple[str, str | None, str | None, str]]:
    """(module file, class, member, clause ID) for every ID cited in interfaces/ docstrings."""
    found: list[tuple[str, str | None, str | None, str]] = []
    for path in sorted(INTERFACES.glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        found.extend((path.name, None, None, i) for i in _cited(ast.get_docstring(tree)))
        for node in tree.body:
            if not isinstance(node, ast.ClassDef):
                continue
            found.extend((path.name, node.name, None, i) for i in _cited(ast.get_docstring(node)))
            for item in node.body:
                if isinstance(item, ast.FunctionDef):
                    cited = _cited(ast.get_docstring(item))
                    found.extend((path.name, node.name, item.name, i) for i in cited)
    return found


def test_every_clause_id_cited_in_the_protocols_exists_and_names_the_member_citing_it() -> None:
    citations = _docstring_citations()
    assert len(citations) > 80, "the protocols' docstrings cite the clauses"
    problems: list[str] = []
    for filename, class_name, member, clause_id in citations:
        where = f"interfaces/{filename}" + (f" {class_name}" if class_name else "")
        where += f".{member}" if member else ""
        if clause_id not in CLAUSES:
            problems.append(f"{where} cites {clause_id}, which docs/spec.md does not define")
            continue
        members = CLAUSES[clause_id].members
        if member is not None and f"{class_name}.{member}" not in members:
            problems.append(f"{where} cites {clause_id}, whose subject is {members}")
        elif class_name is not None and not any(
            m == class_name or m.startswith(f"{class_name}.") for m in members
        ):
            problems.append(f"{where} cites {clause_id}, whose subject is {members}")
    assert not problems, "\n".join(problems)


def test_every_protocol_clause_is_cited_by_the_protocols() -> None:
    cited = {clause_id for *_, clause_id in _docstring_citations()}
    uncited = [c for c in CLAUSES if c not in cited and not c.startswith("ERR-")]
    assert not uncited, f"clauses no protocol docstring cites: {uncited}"
