"""Each large kind's checks are a package split by clause group (issue 15).

The table of kinds lists every module holding a kind's checks; ``checks_for`` finds checks by
those modules only (never by what happened to be imported), orders them by layer, then module,
then definition; each package re-exports every public name of its modules, so imports of
``trainspec.conformance.checks.<kind>.<name>`` keep working and repro scripts import checks
from the package.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from typing import TYPE_CHECKING

import pytest

from trainspec.conformance import core
from trainspec.conformance._helpers import _public_check_module
from trainspec.conformance.core import KINDS, LAYERS, Check, Kind, checks_for
from trainspec.conformance.kinds import KIND_TABLE

if TYPE_CHECKING:
    from types import ModuleType

PACKAGES: list[Kind] = [
    kind
    for kind in KINDS
    if hasattr(importlib.import_module(KIND_TABLE[kind].check_modules[0]), "__path__")
]


def _submodules(package: ModuleType) -> list[str]:
    return [f"{package.__name__}.{info.name}" for info in pkgutil.iter_modules(package.__path__)]


def _checks_defined_in(module: ModuleType) -> list[str]:
    registered = {c.func for c in core._REGISTRY.values()}
    return [
        name
        for name, value in vars(module).items()
        if inspect.isfunction(value) and value.__module__ == module.__name__ and value in registered
    ]


def test_the_large_kinds_are_packages() -> None:
    assert {"accelerator", "precision", "checkpoint_io", "collective", "strategy"} <= set(PACKAGES)


@pytest.mark.parametrize("kind", PACKAGES)
def test_every_module_of_a_check_package_with_checks_is_listed(kind: Kind) -> None:
    listed = KIND_TABLE[kind].check_modules
    package = importlib.import_module(listed[0])
    for name in _submodules(package):
        module = importlib.import_module(name)
        if _checks_defined_in(module):
            assert name in listed, f"{name} defines checks but KIND_TABLE[{kind!r}] omits it"
        else:
            assert name not in listed or name == listed[0], f"{name} is listed but has no check"


@pytest.mark.parametrize("kind", PACKAGES)
def test_every_check_of_a_package_kind_lives_in_one_of_its_modules(kind: Kind) -> None:
    checks = checks_for(kind)
    listed = KIND_TABLE[kind].check_modules

    assert checks
    assert {c.func.__module__ for c in checks} == set(listed[1:])


@pytest.mark.parametrize("kind", PACKAGES)
def test_the_package_re_exports_every_public_name_of_its_modules(kind: Kind) -> None:
    package = importlib.import_module(KIND_TABLE[kind].check_modules[0])
    for name in _submodules(package):
        module = importlib.import_module(name)
        for attribute, value in vars(module).items():
            if attribute.startswith("_") or getattr(value, "__module__", None) != name:
                continue
            assert getattr(package, attribute, None) is value, f"{kind}: {attribute}"
    assert set(package.__all__) <= set(vars(package))


@pytest.mark.parametrize("kind", KINDS)
def test_checks_are_ordered_by_layer_then_listed_module_then_definition(kind: Kind) -> None:
    listed = KIND_TABLE[kind].check_modules
    checks = checks_for(kind)

    def line(check: Check) -> int:
        return inspect.getsourcelines(check.func)[1]

    keys = [(LAYERS.index(c.layer), listed.index(c.func.__module__), line(c)) for c in checks]
    assert keys == sorted(keys)


def test_a_check_registered_outside_the_listed_modules_is_not_found(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(core, "_REGISTRY", dict(core._REGISTRY))
    before = checks_for("accelerator")

    def check_accelerator_registered_by_import_history(target: core.Target[object]) -> None:
        """A check of a module the table does not list."""

    core.check("ACC-1", "accelerator")(check_accelerator_registered_by_import_history)

    assert checks_for("accelerator") == before


def test_the_capabilities_alias_of_each_check_module_is_the_table_vocabulary() -> None:
    for kind in KINDS:
        module = importlib.import_module(KIND_TABLE[kind].check_modules[0])
        assert module.CAPABILITIES == KIND_TABLE[kind].vocabulary, kind


@pytest.mark.parametrize(
    ("module", "public"),
    [
        (
            "trainspec.conformance.checks.checkpoint_io.roundtrip",
            "trainspec.conformance.checks.checkpoint_io",
        ),
        ("trainspec.conformance.checks.launcher", "trainspec.conformance.checks.launcher"),
        ("tests.conformance.faults", "tests.conformance.faults"),
    ],
)
def test_repro_scripts_import_a_check_from_its_package(module: str, public: str) -> None:
    assert _public_check_module(module) == public
