"""Generate ``conformance_tests/clauses.py`` from the normative spec, ``docs/spec.md``.

Usage::

    python scripts/gen_clauses.py           # rewrite conformance_tests/clauses.py
    python scripts/gen_clauses.py --check   # exit 1 if it is out of date

A clause is a level-three heading of the form ``### <ID> — <subject>: <title>`` (spec section
1.3). ``<subject>`` is ``all protocols`` or a comma-separated list of ``Protocol`` /
``Protocol.member`` names. The first sentence of the paragraph under the heading is the clause's
text. The parser refuses what it cannot read instead of guessing: a heading that starts like a
clause ID but does not match the format, a duplicate ID, an ID out of sequence within its
prefix, or a first sentence without an RFC 2119 keyword.

The script needs only the standard library, so it runs before anything is installed.
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SPEC = ROOT / "docs" / "spec.md"
OUTPUT = ROOT / "conformance_tests" / "clauses.py"

NO_MEMBERS = "all protocols"
LINE_LENGTH = 100

_CLAUSE_LIKE = re.compile(r"^###\s+[A-Z][A-Z0-9]*-\d+\b")
_HEADING = re.compile(
    r"^### (?P<id>(?P<prefix>[A-Z][A-Z0-9]*)-(?P<number>[1-9][0-9]*)) — "
    r"(?P<subject>[^:]+): (?P<title>\S.*?)\s*$"
)
_MEMBER = re.compile(r"^[A-Z][A-Za-z0-9]*(?:\.[a-z_][a-z0-9_]*)?$")
_VERSION = re.compile(r"This is version \*\*(?P<version>\d+\.\d+)\*\* of the specification")
_KEYWORD = re.compile(r"\b(?:MUST|SHALL|SHOULD|REQUIRED|RECOMMENDED|MAY|OPTIONAL)\b")
_LINK = re.compile(r"\[([^\]]+)\]\([^)]+\)")
_EMPHASIS = re.compile(r"\*\*?([^*]+?)\*\*?")
_PARAGRAPH_END = ("#", "- ", "* ", "|", "```", "1. ")


class SpecFormatError(ValueError):
    """``docs/spec.md`` does not follow the clause format; the message names the line."""


@dataclass(frozen=True)
class ParsedClause:
    """One clause as read from the spec."""

    id: str
    title: str
    members: tuple[str, ...]
    text: str


def _plain(markdown: str) -> str:
    """Markdown inline text as plain text: links become their label, ``*``/``**`` emphasis is
    dropped, code spans keep their backticks and their content untouched."""
    parts = markdown.split("`")
    for i in range(0, len(parts), 2):  # even parts are outside code spans
        parts[i] = _EMPHASIS.sub(r"\1", _LINK.sub(r"\1", parts[i]))
    return " ".join("`".join(parts).split())


def _first_sentence(paragraph: str) -> str:
    """The paragraph up to the first full stop outside a code span that is followed by
    whitespace and a capital letter, a code span or emphasis."""
    in_code = False
    for i, char in enumerate(paragraph):
        if char == "`":
            in_code = not in_code
        elif char == "." and not in_code:
            rest = paragraph[i + 1 :]
            stripped = rest.lstrip()
            if not rest:
                return paragraph
            starts_sentence = stripped[:1].isupper() or stripped[:1] in ("`", "*")
            if rest[0].isspace() and starts_sentence:
                return paragraph[: i + 1]
    return paragraph


def _members(subject: str, where: str) -> tuple[str, ...]:
    if subject == NO_MEMBERS:
        return ()
    names = tuple(name.strip() for name in subject.split(","))
    for name in names:
        if not _MEMBER.match(name):
            raise SpecFormatError(
                f"{where}: subject entry {name!r} is not 'Protocol' or 'Protocol.member' "
                f"(or write the whole subject as {NO_MEMBERS!r})"
            )
    if len(set(names)) != len(names):
        raise SpecFormatError(f"{where}: subject names a member twice: {subject!r}")
    return names


def parse_spec(text: str) -> tuple[str, list[ParsedClause]]:
    """The spec version and the clauses of ``text`` (the content of docs/spec.md), in order.

    Raises :class:`SpecFormatError` naming the line for anything that breaks the format.
    """
    versions = _VERSION.findall(text)
    if len(versions) != 1:
        raise SpecFormatError(
            "docs/spec.md must state its version exactly once as "
            f"'This is version **X.Y** of the specification'; found {len(versions)}"
        )
    lines = text.splitlines()
    clauses: list[ParsedClause] = []
    seen: dict[str, int] = {}
    last_number: dict[str, int] = {}
    in_fence = False
    for index, line in enumerate(lines):
        if line.startswith("```"):
            in_fence = not in_fence
        if in_fence or not _CLAUSE_LIKE.match(line):
            continue
        where = f"docs/spec.md:{index + 1}"
        match = _HEADING.match(line)
        if match is None:
            raise SpecFormatError(
                f"{where}: clause heading {line!r} does not match "
                "'### <ID> — <subject>: <title>' (an em dash, then a colon after the subject)"
            )
        clause_id, prefix = match["id"], match["prefix"]
        number = int(match["number"])
        if clause_id in seen:
            raise SpecFormatError(
                f"{where}: {clause_id} is already defined at line {seen[clause_id]}"
            )
        expected = last_number.get(prefix, 0) + 1
        if number != expected:
            raise SpecFormatError(
                f"{where}: {clause_id} is out of sequence; the next {prefix} clause is "
                f"{prefix}-{expected} (clause IDs are never renumbered)"
            )
        seen[clause_id] = index + 1
        last_number[prefix] = number
        paragraph: list[str] = []
        for body in lines[index + 1 :]:
            stripped = body.strip()
            if not stripped:
                if paragraph:
                    break
                continue
            if stripped.startswith(_PARAGRAPH_END):
                break
            paragraph.append(stripped)
        sentence = _plain(_first_sentence(" ".join(paragraph)))
        if not _KEYWORD.search(sentence):
            raise SpecFormatError(
                f"{where}: the first sentence of {clause_id} must state the rule with an "
                f"RFC 2119 keyword (MUST, SHOULD, MAY, ...); got {sentence!r}"
            )
        clauses.append(
            ParsedClause(
                id=clause_id,
                title=_plain(match["title"]),
                members=_members(match["subject"].strip(), where),
                text=sentence,
            )
        )
    if not clauses:
        raise SpecFormatError("docs/spec.md defines no clause headings")
    return versions[0], clauses


def _literal(value: str) -> str:
    """A Python string literal for ``value``: double quotes, or single quotes when that avoids
    escaping double quotes."""
    quote = "'" if '"' in value and "'" not in value else '"'
    escaped = value.replace("\\", "\\\\").replace(quote, "\\" + quote)
    return f"{quote}{escaped}{quote}"


def _field(name: str, value: str, indent: int) -> list[str]:
    """``name="value",`` at ``indent``, split into implicitly concatenated parts when long."""
    pad = " " * indent
    single = f"{pad}{name}={_literal(value)},"
    if len(single) <= LINE_LENGTH:
        return [single]
    width = LINE_LENGTH - indent - 4  # the parts are indented once more
    chunks: list[str] = []
    for word in re.findall(r"\S+\s*", value):  # each word keeps its trailing space
        if chunks and len(_literal(chunks[-1] + word)) <= width:
            chunks[-1] += word
        else:
            chunks.append(word)
    out = [f"{pad}{name}=("]
    out.extend(f"{pad}    {_literal(chunk)}" for chunk in chunks)
    out.append(f"{pad}),")
    return out


def _tuple(name: str, values: tuple[str, ...], indent: int) -> list[str]:
    pad = " " * indent
    items = [_literal(value) for value in values]
    inline = f"{pad}{name}=({', '.join(items)}{',' if len(items) == 1 else ''}),"
    if len(inline) <= LINE_LENGTH:
        return [inline]
    return [f"{pad}{name}=(", *(f"{pad}    {item}," for item in items), f"{pad}),"]


_HEADER = '''\
"""The clauses of the normative spec, ``docs/spec.md``, as data.

GENERATED by ``scripts/gen_clauses.py`` from ``docs/spec.md``: do not edit by hand; change the
spec and run ``python scripts/gen_clauses.py``. A test fails when this module and the spec
disagree.

Every conformance check is registered under the ID of the clause it decides (``CKPT-3``); a
failure report quotes the clause's title and text from here.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = ["CLAUSES", "SPEC_VERSION", "Clause", "clause"]

SPEC_VERSION: Final = {version}
"""The version of ``docs/spec.md`` this module was generated from (``trainspec.SPEC_VERSION``)."""


@dataclass(frozen=True)
class Clause:
    """One numbered clause of the spec."""

    id: str
    """The clause ID, ``<PREFIX>-<n>`` (``CKPT-3``); stable, never renumbered or reused."""
    title: str
    """The rule in a few words (``saves are atomic``)."""
    members: tuple[str, ...]
    """What the clause governs: ``Protocol.member`` names, or ``Protocol`` for a rule about
    every operation of a protocol; empty for a rule about all protocols (``ERR-1``)."""
    text: str
    """The first sentence of the clause's normative text (plain text, code in backticks)."""

    @property
    def prefix(self) -> str:
        """The ID's prefix, naming the protocol or area (``CKPT``)."""
        return self.id.rsplit("-", 1)[0]


def clause(id: str) -> Clause:
    """The clause with ID ``id``.

    Raises ``KeyError`` with the closest known IDs and the known ID ranges for an unknown ID.
    """
    try:
        return CLAUSES[id]
    except KeyError:
        pass
    ranges: dict[str, list[int]] = {{}}
    for known in CLAUSES.values():
        ranges.setdefault(known.prefix, []).append(int(known.id.rsplit("-", 1)[1]))
    listing = ", ".join(f"{{p}}-{{min(n)}}..{{max(n)}}" for p, n in ranges.items())
    close = difflib.get_close_matches(str(id).upper(), list(CLAUSES), n=3, cutoff=0.6)
    hint = f"did you mean {{' or '.join(close)}}? " if close else ""
    raise KeyError(
        f"unknown spec clause {{id!r}}; {{hint}}clause IDs are <PREFIX>-<n> "
        f"({{listing}}); see docs/spec.md"
    ) from None


# The data below is laid out by the generator, not by the formatter.
# fmt: off
CLAUSES: Final[Mapping[str, Clause]] = MappingProxyType(
    {{
'''

_FOOTER = """\
    }
)
# fmt: on
\"\"\"Every clause, keyed by ID, in spec order.\"\"\"
"""


def render(version: str, clauses: list[ParsedClause]) -> str:
    """The source of ``conformance_tests/clauses.py`` for these clauses."""
    lines = [_HEADER.format(version=_literal(version)).rstrip("\n")]
    for item in clauses:
        lines.append(f"        {_literal(item.id)}: Clause(")
        lines.extend(_field("id", item.id, 12))
        lines.extend(_field("title", item.title, 12))
        lines.extend(_tuple("members", item.members, 12))
        lines.extend(_field("text", item.text, 12))
        lines.append("        ),")
    return "\n".join(lines) + "\n" + _FOOTER


def generate(spec: Path = SPEC) -> str:
    """The expected content of clauses.py for the spec at ``spec``."""
    version, clauses = parse_spec(spec.read_text(encoding="utf-8"))
    return render(version, clauses)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--check", action="store_true", help="exit 1 if clauses.py is out of date")
    args = parser.parse_args(argv)
    try:
        expected = generate()
    except SpecFormatError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    current = OUTPUT.read_text(encoding="utf-8") if OUTPUT.exists() else ""
    if args.check:
        if current != expected:
            print(
                f"{OUTPUT.relative_to(ROOT)} is out of date with docs/spec.md; "
                "run: python scripts/gen_clauses.py",
                file=sys.stderr,
            )
            return 1
        return 0
    if current != expected:
        OUTPUT.write_text(expected, encoding="utf-8")
        print(f"wrote {OUTPUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
