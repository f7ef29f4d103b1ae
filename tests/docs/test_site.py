"""The documentation site renders everywhere: links instead of Sphinx roles, clause IDs linked to
their clauses, escaped tables, a diagram that needs no network, and protocol docstrings that
open with their lifecycle.

The site is built once per session with ``mkdocs build --strict`` (``TRAINSPEC_SITE_DIR`` names
an existing build to reuse instead, as CI does after its own build step).
"""

from __future__ import annotations

import html.parser
import inspect
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import trainspec

ROOT = Path(__file__).resolve().parents[2]
ROLE = re.compile(r":(?:py:)?(?:class|meth|func|attr|data|mod|exc|obj|const):\s*(?:<code>|`)")
CLAUSE_ID = re.compile(r"(?<![\w-])([A-Z][A-Z0-9]*-\d+)(?![\w-])")
CLAUSE_HEADING = re.compile(r"^###\s+([A-Z][A-Z0-9]*-\d+)\b", re.M)
PROTOCOLS = (
    trainspec.Accelerator,
    trainspec.Precision,
    trainspec.CheckpointIO,
    trainspec.Collective,
    trainspec.ClusterEnvironment,
    trainspec.Launcher,
    trainspec.Strategy,
)


@pytest.mark.parametrize("protocol", PROTOCOLS, ids=lambda p: p.__name__)
def test_protocol_class_docstring_opens_with_its_lifecycle(protocol: type) -> None:
    # help(trainspec.X) and an IDE's hover show the class docstring, not the module's.
    doc = inspect.getdoc(protocol)
    assert doc is not None
    paragraphs = doc.split("\n\n")
    assert paragraphs[1].startswith("Lifecycle"), paragraphs[:2]
    assert re.search(r"^\s+1\)", paragraphs[2], re.M), paragraphs[2]


# -- the built site --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    reuse = os.environ.get("TRAINSPEC_SITE_DIR")
    if reuse:
        return Path(reuse)
    pytest.importorskip("mkdocs", reason="the docs tools come with the dev extra")
    directory = tmp_path_factory.mktemp("site")
    completed = subprocess.run(
        [
            sys.executable,
            "-m",
            "mkdocs",
            "build",
            "--strict",
            "--quiet",
            "--site-dir",
            str(directory),
        ],
        cwd=ROOT,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        check=False,
    )
    assert completed.returncode == 0, completed.stdout + completed.stderr
    return directory


def _pages(site: Path) -> list[Path]:
    pages = sorted(site.rglob("*.html"))
    assert pages, site
    return pages


class _Text(html.parser.HTMLParser):
    """Text of a page with, for each piece, whether it is inside a link and whether it is
    exempt from linking (a code block, a heading, inline code that is more than an ID, such as
    ``pytest -k CKPT-3``); plus every element's id and every resource the page loads."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.pieces: list[tuple[str, bool, bool]] = []  # text, in a link, exempt
        self.ids: set[str] = set()
        self.loads: list[str] = []
        self._links = 0
        self._exempt = 0
        self._code = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        if values.get("id"):
            self.ids.add(str(values["id"]))
        if tag == "a":
            self._links += 1
        if tag == "code":
            self._code += 1
        if tag in ("pre", "h1", "h2", "h3", "h4", "script", "style", "title", "svg"):
            self._exempt += 1
        source = values.get("src") or (values.get("href") if tag == "link" else None)
        if source and tag in ("script", "img", "link", "iframe", "source", "video", "audio"):
            self.loads.append(source)

    def handle_endtag(self, tag: str) -> None:
        if tag == "a":
            self._links = max(self._links - 1, 0)
        if tag == "code":
            self._code = max(self._code - 1, 0)
        if tag in ("pre", "h1", "h2", "h3", "h4", "script", "style", "title", "svg"):
            self._exempt = max(self._exempt - 1, 0)

    def handle_data(self, data: str) -> None:
        command = self._code > 0 and CLAUSE_ID.fullmatch(data.strip()) is None
        self.pieces.append((data, self._links > 0, self._exempt > 0 or command))


def _parse(page: Path) -> _Text:
    parser = _Text()
    parser.feed(page.read_text(encoding="utf-8"))
    return parser


def test_built_site_shows_no_sphinx_roles(site: Path) -> None:
    raw = {
        str(page.relative_to(site)): ROLE.findall(page.read_text(encoding="utf-8"))[:3]
        for page in _pages(site)
    }
    assert {page: found for page, found in raw.items() if found} == {}


def test_literal_block_markers_do_not_show(site: Path) -> None:
    # "Lifecycle::" is reStructuredText for "Lifecycle:" and a code block after it.
    api = (site / "api" / "index.html").read_text(encoding="utf-8")
    assert "Lifecycle:</p>" in api and "Lifecycle::" not in api


def test_roles_in_docstrings_became_links_to_the_objects(site: Path) -> None:
    # Accelerator.teardown's docstring says "Release what :meth:`setup_device` acquired": the
    # role names a sibling method, resolved from the docstring's own scope.
    api = (site / "api" / "index.html").read_text(encoding="utf-8")
    assert re.search(
        r'<a class="autorefs autorefs-internal"[^>]*href="#trainspec\.Accelerator\.setup_device"'
        r"><code>setup_device\(\)</code></a> acquired",
        api,
    ), "Accelerator.teardown's :meth:`setup_device` is not a link"


def test_every_clause_id_outside_the_spec_links_to_its_clause(site: Path) -> None:
    clauses = set(CLAUSE_HEADING.findall((ROOT / "docs" / "spec.md").read_text(encoding="utf-8")))
    spec = _parse(site / "spec" / "index.html")
    assert {clause.lower() for clause in clauses} <= spec.ids  # the short anchors exist
    unlinked: dict[str, set[str]] = {}
    for page in _pages(site):
        if page.parent.name in ("spec", "search") or page.name == "404.html":
            continue
        for text, linked, exempt in _parse(page).pieces:
            for clause in CLAUSE_ID.findall(text):
                if clause in clauses and not linked and not exempt:
                    unlinked.setdefault(str(page.relative_to(site)), set()).add(clause)
    assert unlinked == {}


def test_clause_links_point_at_existing_anchors_of_the_spec(site: Path) -> None:
    spec_ids = _parse(site / "spec" / "index.html").ids
    guide = (site / "plugin-authors" / "guide" / "index.html").read_text(encoding="utf-8")
    targets = re.findall(r'href="\.\./\.\./spec/#([^"]+)"', guide)
    assert targets, "the guide links no clause"
    assert set(targets) <= spec_ids


def test_clause_families_in_tables_keep_their_asterisks(site: Path) -> None:
    for page in ("plugin-authors/guide", "plugin-authors/running-the-kit"):
        text = "".join(t for t, _, _ in _parse(site / page / "index.html").pieces)
        assert "CKPT-*, ACKPT-*" in text, page


def test_home_page_diagram_is_bundled_and_drawn_once(site: Path) -> None:
    home = _parse(site / "index.html")
    text = "".join(t for t, _, _ in home.pieces)
    assert "flowchart" not in text and "┌" not in text  # no mermaid source, no ASCII copy
    images = [source for source in home.loads if source.endswith(".svg")]
    assert images == ["assets/architecture.svg"]
    assert (site / "assets" / "architecture.svg").is_file()


def test_no_page_loads_anything_from_outside_the_site(site: Path) -> None:
    external = {
        str(page.relative_to(site)): [
            source for source in _parse(page).loads if re.match(r"^(?:[a-z]+:)?//", source)
        ]
        for page in _pages(site)
    }
    assert {page: found for page, found in external.items() if found} == {}
