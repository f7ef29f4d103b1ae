"""Names that explain themselves: the hypothesis module's new name and its deprecated alias."""

from __future__ import annotations

import importlib
import re
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from trainspec.conformance import hypothesis_strategies

if TYPE_CHECKING:
    from types import ModuleType

ROOT = Path(__file__).resolve().parents[3]
_OLD = "trainspec.conformance.strategies"


def _import_old_name() -> ModuleType:
    sys.modules.pop(_OLD, None)
    try:
        return importlib.import_module(_OLD)
    finally:
        sys.modules.pop(_OLD, None)  # the next import warns again


def test_the_old_hypothesis_module_name_warns_and_reexports_the_same_objects() -> None:
    with pytest.warns(DeprecationWarning, match="hypothesis_strategies"):
        old = _import_old_name()
    assert list(old.__all__) == list(hypothesis_strategies.__all__)
    assert hypothesis_strategies.__all__, "the new module exports nothing"
    for name in hypothesis_strategies.__all__:
        assert getattr(old, name) is getattr(hypothesis_strategies, name), name


def test_the_old_hypothesis_module_name_is_an_error_under_warnings_as_errors() -> None:
    """What a plugin author's pytest (``-W error``) sees: the warning, naming the new module."""
    completed = subprocess.run(
        [sys.executable, "-W", "error::DeprecationWarning", "-c", f"import {_OLD}"],
        capture_output=True,
        text=True,
        check=False,
        cwd=ROOT,
    )
    assert completed.returncode != 0
    assert "trainspec.conformance.hypothesis_strategies" in completed.stderr


_OLD_IMPORT = re.compile(
    r"(?:from\s+trainspec\.conformance\.strategies\s+import|"
    r"import\s+trainspec\.conformance\.strategies\b|"
    r"from\s+trainspec\.conformance\s+import\s+(?:\([^)]*\bstrategies\b|[^\n]*\bstrategies\b))"
)
_SEARCHED = (
    "conformance_tests",
    "reference_impls",
    "interfaces",
    "bridges",
    "tests",
    "examples",
    "scripts",
    "benchmarks",
)


@pytest.mark.parametrize(
    "text",
    [
        "from trainspec.conformance.strategies import state_dicts",
        "import trainspec.conformance.strategies",
        "from trainspec.conformance import strategies",
        "from trainspec.conformance import (\n    core,\n    strategies,\n)",
    ],
)
def test_the_repository_scan_recognises_a_use_of_the_old_name(text: str) -> None:
    assert _OLD_IMPORT.search(text)
    assert not _OLD_IMPORT.search(text.replace("strategies", "hypothesis_strategies"))


_SEARCHED_FILES = ("README.md", "mkdocs.yml")


def test_nothing_in_the_repository_uses_the_old_hypothesis_module_name() -> None:
    """pytest runs with warnings as errors: one import of the alias would fail a run."""
    this = Path(__file__).resolve()
    paths = [p for folder in _SEARCHED for p in (ROOT / folder).rglob("*.py")]
    paths += [p for p in (ROOT / "docs").rglob("*.md")]
    paths += [ROOT / name for name in _SEARCHED_FILES]
    users = []
    for path in paths:
        if path.resolve() == this or path == ROOT / "conformance_tests" / "strategies.py":
            continue
        text = path.read_text(encoding="utf-8")
        if _OLD_IMPORT.search(text) or f"::: {_OLD}" in text:
            users.append(str(path.relative_to(ROOT)))
    assert not users, f"still importing or documenting {_OLD}: {users}"
