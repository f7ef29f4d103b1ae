"""Each public ``__all__`` of the contracts is sorted and complete.

Sorted means isort style (SCREAMING_CASE constants, then CamelCase, then the rest, each in
alphabetical order) unless the line above ``__all__`` is a comment documenting another order.
Complete means every public name the module defines is listed and everything listed exists;
the package re-exports every public name of every interface module.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

import trainspec

if TYPE_CHECKING:
    from types import ModuleType

INTERFACE_MODULES = sorted(
    f"trainspec.{info.name}"
    for info in pkgutil.iter_modules(trainspec.__path__)
    if not info.ispkg and not info.name.startswith("_")
)
MODULES = ["trainspec", *INTERFACE_MODULES]
API_PAGE = Path(__file__).resolve().parents[2] / "docs" / "api.md"


def _isort_key(name: str) -> tuple[int, str]:
    if name.isupper():
        return (0, name)
    if name[:1].isupper():
        return (1, name)
    return (2, name)


def _tree(module: ModuleType) -> ast.Module:
    source = inspect.getsourcefile(module)
    assert source is not None
    return ast.parse(Path(source).read_text(encoding="utf-8"))


def _defined_public_names(module: ModuleType) -> set[str]:
    """Names bound at the top level of the module's source by a class, function or assignment."""
    names: set[str] = set()
    for node in _tree(module).body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return {name for name in names if not name.startswith("_")}


def _order_is_documented(module: ModuleType) -> bool:
    source = inspect.getsource(module).splitlines()
    index = next(i for i, line in enumerate(source) if line.startswith("__all__"))
    return index > 0 and source[index - 1].startswith("#") and "order" in source[index - 1]


def test_the_interface_modules_are_all_checked() -> None:
    expected = {"errors", "types", "accelerator", "precision", "checkpoint_io", "collective"}
    expected |= {"cluster_environment", "launcher", "strategy", "capabilities"}
    assert {f"trainspec.{name}" for name in expected} <= set(MODULES)


@pytest.mark.parametrize("name", MODULES)
def test_all_is_sorted_or_its_order_documented(name: str) -> None:
    module = importlib.import_module(name)
    listed = list(module.__all__)
    assert len(set(listed)) == len(listed), f"{name}.__all__ lists a name twice"
    if not _order_is_documented(module):
        assert listed == sorted(listed, key=_isort_key), (
            f"{name}.__all__ must be sorted (constants, then classes, then the rest, each "
            "alphabetical), or document its order in a comment on the line above"
        )


@pytest.mark.parametrize("name", MODULES)
def test_all_lists_every_public_name_and_only_existing_ones(name: str) -> None:
    module = importlib.import_module(name)
    listed = set(module.__all__)
    missing_objects = sorted(n for n in listed if not hasattr(module, n))
    assert not missing_objects, f"{name}.__all__ lists names the module lacks: {missing_objects}"
    unlisted = sorted(_defined_public_names(module) - listed)
    assert not unlisted, f"{name} defines public names missing from __all__: {unlisted}"


def test_the_package_reexports_every_public_name_of_its_modules() -> None:
    exported = set(trainspec.__all__)
    for name in INTERFACE_MODULES:
        module = importlib.import_module(name)
        missing = sorted(set(module.__all__) - exported)
        assert not missing, f"trainspec.__all__ lacks {name}'s public names {missing}"
        for public in module.__all__:
            assert getattr(trainspec, public) is getattr(module, public)
    imported = {
        alias.asname or alias.name
        for node in _tree(trainspec).body
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("trainspec.")
        for alias in node.names
    }
    assert imported <= exported, f"imported but not exported: {sorted(imported - exported)}"


def test_the_api_page_documents_every_public_name() -> None:
    page = API_PAGE.read_text(encoding="utf-8")
    undocumented = [
        name
        for name in trainspec.__all__
        if not name.startswith("__") and f"trainspec.{name}" not in page
    ]
    assert not undocumented, f"docs/api.md has no entry for {undocumented}"
