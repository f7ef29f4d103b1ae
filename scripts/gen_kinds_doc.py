"""Regenerate the kinds section of ``docs/plugin-authors/running-the-kit.md`` from the kit's
table of kinds (:mod:`trainspec.conformance.kinds`).

Usage::

    python scripts/gen_kinds_doc.py           # rewrite the section between its markers
    python scripts/gen_kinds_doc.py --check   # exit 1 if it is out of date

The section lies between ``DOC_BEGIN`` and ``DOC_END``; without them it is appended.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from trainspec.conformance.kinds import DOC_BEGIN, DOC_END, markdown

PAGE = Path(__file__).resolve().parent.parent / "docs" / "plugin-authors" / "running-the-kit.md"


def regenerated(text: str) -> str:
    """``text`` (the page) with its generated section replaced by the current one."""
    section = markdown()
    start = text.find(DOC_BEGIN)
    end = text.find(DOC_END)
    if start < 0 or end < start:
        return text.rstrip("\n") + "\n\n" + section
    return text[:start] + section + "\n" + text[end + len(DOC_END) :].lstrip("\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if the page is out of date")
    args = parser.parse_args(argv)
    text = PAGE.read_text(encoding="utf-8")
    new = regenerated(text)
    if args.check:
        if new != text:
            print(f"{PAGE} is out of date; run python scripts/gen_kinds_doc.py", file=sys.stderr)
            return 1
        return 0
    if new != text:
        PAGE.write_text(new, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
