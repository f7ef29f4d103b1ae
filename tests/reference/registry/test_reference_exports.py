"""``trainspec.reference`` exports every public implementation lazily: the package imports
neither torch nor any implementation, ``__all__`` is sorted and complete, and every name
resolves to the object of that name."""

from __future__ import annotations

import importlib
import inspect
import subprocess
import sys

import pytest

import trainspec
import trainspec.reference as reference

SUBPACKAGES = (
    "accelerators",
    "precisions",
    "checkpoint_io",
    "collectives",
    "cluster_environments",
    "launchers",
    "strategies",
)
PROTOCOLS = (
    trainspec.Accelerator,
    trainspec.Precision,
    trainspec.CheckpointIO,
    trainspec.Collective,
    trainspec.ClusterEnvironment,
    trainspec.Launcher,
    trainspec.Strategy,
)


def test_importing_the_package_imports_no_torch_and_no_implementation() -> None:
    code = (
        "import sys, trainspec.reference as r\n"
        "loaded = sorted(m for m in sys.modules if m.startswith('trainspec.reference.'))\n"
        "assert 'torch' not in sys.modules, 'torch imported'\n"
        "assert loaded == [], loaded\n"
        "r.Registry; r.resolve\n"  # discovery and the connector need no torch either
        "assert 'torch' not in sys.modules, 'torch imported by Registry/resolve'\n"
        "print('ok')\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


def test_all_is_sorted_and_matches_the_lazy_table() -> None:
    assert reference.__all__ == sorted(reference.__all__)
    assert set(reference.__all__) == set(reference._EXPORTS)


@pytest.mark.parametrize("name", reference.__all__)
def test_every_exported_name_resolves_to_the_object_of_that_name(name: str) -> None:
    value = getattr(reference, name)
    assert getattr(value, "__name__", name) == name
    assert value is getattr(importlib.import_module(reference._EXPORTS[name]), name)


def test_unknown_names_raise_attribute_error() -> None:
    with pytest.raises(AttributeError, match="NoSuchThing"):
        reference.NoSuchThing  # noqa: B018


@pytest.mark.parametrize("package", SUBPACKAGES)
def test_every_public_implementation_class_is_exported_at_the_top(package: str) -> None:
    module = importlib.import_module(f"trainspec.reference.{package}")
    missing = []
    for name in module.__all__:
        value = getattr(module, name)
        if not inspect.isclass(value):
            continue
        implements = any(protocol in value.__mro__ for protocol in PROTOCOLS)  # explicit
        if implements and name not in reference.__all__:
            missing.append(name)
    assert missing == []


@pytest.mark.parametrize("package", ["strategies", "collectives"])
def test_lazy_subpackages_resolve_their_names(package: str) -> None:
    module = importlib.import_module(f"trainspec.reference.{package}")
    assert module.__all__ == sorted(module.__all__)
    for name in module.__all__:
        assert getattr(module, name) is not None
    assert set(module.__all__) <= set(dir(module))
