"""Cross-references for the documentation site, made when the site is built.

Two hooks share one rule set:

- ``CrossReferences``, a griffe extension (mkdocs.yml: mkdocstrings' ``extensions``), rewrites
  every docstring of the package as it is loaded: a Sphinx role (``:class:`~trainspec.X```,
  ``:meth:`setup_device```, ``:func:``, ``:attr:``, ``:data:``, ``:mod:``, ``:exc:``,
  ``:obj:``) becomes an autorefs cross-reference to the object it names (resolved from the
  docstring's own scope, so ``:meth:`setup_device``` in a method of ``Accelerator`` links to
  ``Accelerator.setup_device``), shown as code; a name the site does not document (``torch``'s,
  a private helper) stays plain code. A clause ID (``ACC-4``) becomes a link to its clause in
  the specification.
- ``on_page_markdown``, a mkdocs hook (mkdocs.yml: ``hooks``), links every clause ID in the
  pages' prose, tables and inline code (not in code blocks, headings or existing links).

The sources keep Sphinx roles: ``help()`` and IDEs show them as they are, and the site shows
links. The clause anchors are read from docs/spec.md, with the heading slugs mkdocs gives them.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

ROOT = Path(__file__).resolve().parent.parent
SPEC = ROOT / "docs" / "spec.md"

_CLAUSE_HEADING = re.compile(r"^###\s+(?P<id>[A-Z][A-Z0-9]*-\d+)\b.*$", re.M)
ROLE = re.compile(
    r":(?:py:)?(?P<role>class|meth|func|attr|data|mod|exc|obj|const):`(?P<target>[^`]+)`"
)
"""A Sphinx cross-reference role; the built site must show none (tests/docs)."""
_CLAUSE_ID = re.compile(r"(?<![\w-])(?P<id>[A-Z][A-Z0-9]*-\d+)(?![\w-])")
# Spans a clause ID inside must not be rewritten: inline code (handled on its own), links
# (inline and reference style), HTML tags.
_SPANS = re.compile(
    r"(?P<code>(?P<ticks>`+)(?P<inner>.+?)(?P=ticks))"
    r"|(?P<link>!?\[[^\]]*\](?:\([^)]*\)|\[[^\]]*\]))"
    r"|(?P<tag><[^>\n]+>)"
)


@functools.cache
def clause_anchors() -> dict[str, str]:
    """Every clause ID of docs/spec.md and its anchor: the ID in lower case (``acc-4``), which
    :func:`anchor_clauses` puts on the clause's heading in the built spec."""
    text = SPEC.read_text(encoding="utf-8")
    return {m.group("id"): m.group("id").lower() for m in _CLAUSE_HEADING.finditer(text)}


def anchor_clauses(markdown: str) -> str:
    """The spec's Markdown with a short anchor (``#acc-4``, an autorefs anchor that aliases the
    heading) before every clause heading, so that links need not repeat the heading's slug."""
    return _CLAUSE_HEADING.sub(
        lambda m: f"[](){{#{m.group('id').lower()}}}\n{m.group(0)}", markdown
    )


def _link_ids(text: str, link: Callable[[str, bool], str]) -> str:
    """``text`` (one line of Markdown) with each known clause ID outside links and tags
    replaced by ``link(id, in_code)``; an inline code span that is exactly an ID is linked."""
    anchors = clause_anchors()

    def prose(segment: str) -> str:
        return _CLAUSE_ID.sub(
            lambda m: link(m.group("id"), False) if m.group("id") in anchors else m.group(0),
            segment,
        )

    out: list[str] = []
    position = 0
    for span in _SPANS.finditer(text):
        out.append(prose(text[position : span.start()]))
        inner = span.group("inner")
        if span.group("code") and inner is not None and inner.strip() in anchors:
            out.append(link(inner.strip(), True))
        else:
            out.append(span.group(0))
        position = span.end()
    out.append(prose(text[position:]))
    return "".join(out)


def _markdown_lines(text: str, *, indented_code: bool) -> Iterator[tuple[str, bool]]:
    """Each line of ``text`` and whether it may be rewritten: not inside a fenced block, not a
    heading, and (``indented_code``) not an indented code block after a blank line."""
    fence: str | None = None
    in_indented = False
    previous_blank = True
    for line in text.split("\n"):
        stripped = line.strip()
        if fence is not None:
            if stripped.startswith(fence):
                fence = None
            yield line, False
            continue
        if stripped.startswith(("```", "~~~")):
            fence = stripped[:3]
            yield line, False
            continue
        indent = len(line) - len(line.lstrip(" "))
        if indented_code and stripped and indent >= 4 and (previous_blank or in_indented):
            in_indented = True
        elif stripped:
            in_indented = False
        previous_blank = not stripped
        yield line, not (in_indented or stripped.startswith("#"))


def link_clause_ids_in_markdown(markdown: str) -> str:
    """A page's Markdown with every clause ID linked to its clause (autorefs reference)."""
    anchors = clause_anchors()

    def link(clause: str, in_code: bool) -> str:
        title = f"`{clause}`" if in_code else clause
        return f"[{title}][{anchors[clause]}]"

    return "\n".join(
        _link_ids(line, link) if rewrite else line
        for line, rewrite in _markdown_lines(markdown, indented_code=False)
    )


def rewrite_docstring(text: str, resolve: Callable[[str], str | None]) -> str:
    """A docstring with its roles as autorefs cross-references and its clause IDs linked.

    ``resolve`` turns a role's target (``setup_device``, ``trainspec.X``, ``Runner.launch``)
    into the path of the object it names, or ``None`` when it cannot.
    """
    anchors = clause_anchors()

    def role(match: re.Match[str]) -> str:
        target = match.group("target").strip()
        title_and_target = re.fullmatch(r"(?P<title>.+?)\s*<(?P<path>[^>]+)>", target)
        if title_and_target is not None:
            title, path = title_and_target.group("title"), title_and_target.group("path")
        else:
            path = target.lstrip("~!")
            title = path.rsplit(".", 1)[-1] if target.startswith("~") else path
        path = path.lstrip("~!").replace(" ", "").replace("\n", "")
        if match.group("role") in ("meth", "func") and not title.endswith(")"):
            title += "()"
        identifier = resolve(path) or path
        return (
            f'<autoref identifier="{identifier}" optional><code>{_escape(title)}</code></autoref>'
        )

    def link(clause: str, in_code: bool) -> str:
        del in_code
        return f"[`{clause}`][{anchors[clause]}]" if anchors else clause

    # reStructuredText's literal-block marker: "Lifecycle::" reads "Lifecycle:" (a lone "::" line
    # goes); the indented block after it is already a Markdown code block.
    text = re.sub(r"(?m)^[ \t]*::\n(?=[ \t]*\n)", "", text)
    text = re.sub(r"(?m)(\S)::$(?=\n[ \t]*\n)", r"\1:", text)
    out: list[str] = []
    for line, rewrite in _markdown_lines(
        ROLE.sub(role, _join_split_roles(text)), indented_code=True
    ):
        out.append(_link_ids(line, link) if rewrite else line)
    return "\n".join(out)


def _join_split_roles(text: str) -> str:
    """Roles whose target a line break split (``:meth:`Strategy.\\n    setup```) on one line."""
    return re.sub(r"(:[a-z]+:`[^`\n]*)\n\s*([^`\n]*`)", r"\1\2", text)


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


# -- mkdocs hook ---------------------------------------------------------------------------------


def on_config(config: Any, **kwargs: Any) -> Any:
    """mkdocs hook: read the spec's clauses anew on every build (``mkdocs serve`` rebuilds)."""
    clause_anchors.cache_clear()
    return config


def on_page_markdown(markdown: str, *, page: Any, **kwargs: Any) -> str:
    """mkdocs hook: anchor the clauses of the spec, and link the clause IDs of every page."""
    if page.file.src_uri == "spec.md":
        markdown = anchor_clauses(markdown)
    return link_clause_ids_in_markdown(markdown)


# -- griffe extension ----------------------------------------------------------------------------

try:
    import griffe
except ImportError:  # building without mkdocstrings: the hook above still works
    griffe = None  # type: ignore[assignment]

if griffe is not None:

    class CrossReferences(griffe.Extension):
        """Rewrites every docstring of a loaded package (see the module docstring)."""

        def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
            seen: set[int] = set()
            for obj in _walk(pkg, seen):
                docstring = obj.docstring
                if docstring is None or not docstring.value:
                    continue
                docstring.value = rewrite_docstring(
                    docstring.value, functools.partial(_resolve, obj)
                )

    def _walk(obj: griffe.Object, seen: set[int]) -> Iterator[griffe.Object]:
        if id(obj) in seen:
            return
        seen.add(id(obj))
        yield obj
        for member in obj.members.values():
            if not member.is_alias:
                yield from _walk(member, seen)  # type: ignore[arg-type]

    def _resolve(obj: griffe.Object, path: str) -> str | None:
        """The object ``path`` names, seen from ``obj``'s scope: its members, its parents'
        members and imports, then the package root (``trainspec.X``)."""
        head, _, rest = path.partition(".")
        for scope in (obj, obj.parent):
            if scope is None:
                continue
            try:
                resolved = scope.resolve(head)
            except Exception:  # griffe's NameResolutionError and alias errors alike
                continue
            return f"{resolved}.{rest}" if rest else resolved
        return path if "." in path else None
