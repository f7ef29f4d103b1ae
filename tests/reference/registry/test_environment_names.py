"""One name for the environment concept: ``cluster_environment(s)`` in the protocol, the kind,
the checks, the reference package and the entry-point group; the old package and the old group
still work (the package warns)."""

from __future__ import annotations

import importlib
import re
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

import trainspec
from trainspec.conformance.kinds import kind_spec
from trainspec.reference import cluster_environments
from trainspec.reference.registry import (
    ENTRY_POINT_GROUPS,
    LEGACY_ENTRY_POINT_GROUPS,
    default_registry,
)

if TYPE_CHECKING:
    from tests.reference.registry.conftest import InstallPlugin

ROOT = Path(__file__).resolve().parents[3]
_OLD = "trainspec.reference.environments"
_SUBMODULES = ("_variables", "detection", "local", "slurm", "torchelastic", "xla")

TINY_ENVIRONMENT = '''
from trainspec.reference.cluster_environments.local import LocalEnvironment


class TinyEnvironment(LocalEnvironment):
    """A tiny test environment."""
'''


def _forget_old_names() -> None:
    for name in [n for n in sys.modules if n == _OLD or n.startswith(f"{_OLD}.")]:
        del sys.modules[name]


def test_every_place_spells_the_concept_cluster_environment() -> None:
    spec = kind_spec("cluster_environment")
    assert spec.protocol is trainspec.ClusterEnvironment
    assert spec.entry_point_group == ENTRY_POINT_GROUPS["cluster_environment"]
    assert spec.entry_point_group == "trainspec.cluster_environments"
    assert cluster_environments.__name__ == "trainspec.reference.cluster_environments"
    assert "trainspec.conformance.checks.cluster_environment" in spec.check_modules


def test_the_old_package_warns_and_gives_the_same_modules_and_objects() -> None:
    _forget_old_names()
    try:
        with pytest.warns(DeprecationWarning, match="trainspec.reference.cluster_environments"):
            old = importlib.import_module(_OLD)
        assert list(old.__all__) == list(cluster_environments.__all__)
        for name in cluster_environments.__all__:
            assert getattr(old, name) is getattr(cluster_environments, name), name
        for sub in _SUBMODULES:
            canonical = importlib.import_module(f"{cluster_environments.__name__}.{sub}")
            assert importlib.import_module(f"{_OLD}.{sub}") is canonical, sub
    finally:
        _forget_old_names()


def test_an_old_submodule_import_warns_in_a_fresh_process() -> None:
    code = (
        "import warnings; warnings.simplefilter('error', DeprecationWarning)\n"
        f"from {_OLD}.local import LocalEnvironment\n"
    )
    completed = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False, cwd=ROOT
    )
    assert completed.returncode != 0
    assert "trainspec.reference.cluster_environments" in completed.stderr


def test_the_registry_reads_the_deprecated_group_too(install_plugin: InstallPlugin) -> None:
    assert LEGACY_ENTRY_POINT_GROUPS["cluster_environment"] == ("trainspec.environments",)
    install_plugin(
        "tiny-env-plugin",
        "1.0",
        {"trainspec.environments": {"tiny-old": "tiny_env_mod:TinyEnvironment"}},
        {"tiny_env_mod": TINY_ENVIRONMENT},
    )
    registry = default_registry()
    assert "tiny-old" in registry.names("cluster_environment")
    assert registry.get("cluster_environment", "tiny-old").__name__ == "TinyEnvironment"  # type: ignore[attr-defined]
    assert {"local", "slurm", "torchelastic"} <= set(registry.names("cluster_environment"))


def test_the_registry_reads_the_canonical_group(install_plugin: InstallPlugin) -> None:
    install_plugin(
        "tiny-env-plugin",
        "1.0",
        {"trainspec.cluster_environments": {"tiny-new": "tiny_env_mod:TinyEnvironment"}},
        {"tiny_env_mod": TINY_ENVIRONMENT},
    )
    assert "tiny-new" in default_registry().names("cluster_environment")


def test_the_same_entry_in_both_groups_is_one_component(install_plugin: InstallPlugin) -> None:
    """A plugin in transition may declare both groups; that is not a name clash."""
    both = {"tiny-both": "tiny_env_mod:TinyEnvironment"}
    install_plugin(
        "tiny-env-plugin",
        "1.0",
        {"trainspec.cluster_environments": both, "trainspec.environments": both},
        {"tiny_env_mod": TINY_ENVIRONMENT},
    )
    [info] = [
        i
        for i in default_registry().list_components("cluster_environment")
        if i.name == "tiny-both"
    ]
    assert info.error is None


_OLD_IMPORT = re.compile(  # an import, a "module:attribute" string, a docs directive or role
    r"(?:\bfrom\s+|\bimport\s+|[\"']|:::\s+|:\w+:`~?)trainspec\.reference\.environments\b"
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
        "from trainspec.reference.environments.local import LocalEnvironment",
        "import trainspec.reference.environments",
        '"trainspec.reference.environments.local:LocalEnvironment"',
        "::: trainspec.reference.environments.local.LocalEnvironment",
        ":class:`~trainspec.reference.environments.LocalEnvironment`",
    ],
)
def test_the_repository_scan_recognises_a_use_of_the_old_name(text: str) -> None:
    assert _OLD_IMPORT.search(text)
    assert not _OLD_IMPORT.search(text.replace(".environments", ".cluster_environments"))


def test_nothing_in_the_repository_uses_the_old_package_name() -> None:
    """pytest runs with warnings as errors: one import of the old name would fail a run."""
    this = Path(__file__).resolve()
    alias = ROOT / "reference_impls" / "environments" / "__init__.py"
    paths = [p for folder in _SEARCHED for p in (ROOT / folder).rglob("*.py")]
    paths += [ROOT / "pyproject.toml", ROOT / "docs" / "api-reference.md"]
    users = [
        str(path.relative_to(ROOT))
        for path in paths
        if path.resolve() not in (this, alias)
        and _OLD_IMPORT.search(path.read_text(encoding="utf-8"))
    ]
    assert not users, f"still using {_OLD}: {users}"
