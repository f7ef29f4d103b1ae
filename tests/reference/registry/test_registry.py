"""Registry: entry-point discovery of built-ins and installed plugins, lazy loading,
duplicates, programmatic registration, and list_components never raising."""

from __future__ import annotations

import sys
import threading

import pytest

from trainspec import ConfigurationError, Strategy
from trainspec.reference.connector import resolve
from trainspec.reference.precisions import Float32Precision
from trainspec.reference.registry import (
    ENTRY_POINT_GROUPS,
    REGISTRY_KINDS,
    ComponentInfo,
    Registry,
    default_registry,
)
from trainspec.reference.strategies.single_device import SingleDeviceStrategy

from .conftest import TINY_ACCELERATOR, InstallPlugin

BUILT_INS = {
    "accelerator": {"cpu", "cuda", "xla"},
    "strategy": {"single_device", "ddp", "xla"},
    "precision": {"32-true", "64-true", "16-true", "bf16-true", "16-mixed", "bf16-mixed"},
    "checkpoint_io": {"torch", "async", "safetensors", "memory"},
    "cluster_environment": {"local", "torchelastic", "slurm"},
}


def test_every_kind_has_a_group() -> None:
    assert set(ENTRY_POINT_GROUPS) == set(REGISTRY_KINDS) == set(BUILT_INS)


@pytest.mark.parametrize("kind", REGISTRY_KINDS)
def test_built_ins_are_registered_through_entry_points(kind: str) -> None:
    assert BUILT_INS[kind] <= set(Registry().names(kind))  # type: ignore[arg-type]


def test_get_loads_the_built_in_factory() -> None:
    registry = Registry()
    assert registry.get("precision", "32-true") is Float32Precision
    assert registry.get("strategy", "single_device") is SingleDeviceStrategy
    assert registry.get("precision", "32-true") is registry.get("precision", "32-true")


def test_list_components_describes_built_ins() -> None:
    infos = {info.name: info for info in Registry().list_components("accelerator")}
    cpu = infos["cpu"]
    assert isinstance(cpu, ComponentInfo)
    assert cpu.kind == "accelerator"
    assert cpu.object_path == "trainspec.reference.accelerators.cpu:CPUAccelerator"
    assert cpu.distribution == "trainspec" and cpu.version
    assert cpu.description.startswith("Accelerator for")
    assert "\n" not in cpu.description
    assert cpu.available is True and cpu.error is None
    assert infos["cuda"].available in (True, False)
    precisions = Registry().list_components("precision")
    assert [i.name for i in precisions] == sorted(i.name for i in precisions)
    assert all(i.available is None for i in precisions)


def test_unknown_name_lists_the_known_ones_and_how_to_install() -> None:
    with pytest.raises(ConfigurationError) as info:
        Registry().get("accelerator", "hpu")
    message = str(info.value)
    assert "'hpu'" in message and "'cpu'" in message and "'cuda'" in message
    assert "pip install" in message and "trainspec.accelerators" in message


@pytest.mark.parametrize("kind", ["accelerators", "Strategy", "", None])
def test_unknown_kind_raises(kind: object) -> None:
    with pytest.raises(ConfigurationError, match="cluster_environment"):
        Registry().names(kind)  # type: ignore[arg-type]


def test_non_string_name_raises() -> None:
    with pytest.raises(ConfigurationError):
        Registry().get("accelerator", 3)  # type: ignore[arg-type]


def test_an_installed_plugin_is_found_by_name_without_an_import(
    install_plugin: InstallPlugin,
) -> None:
    install_plugin(
        "tiny-plugin",
        "1.2.3",
        {"trainspec.accelerators": {"tiny": "tiny_plugin_mod:TinyAccelerator"}},
        {"tiny_plugin_mod": TINY_ACCELERATOR},
    )
    assert "tiny" in default_registry().names("accelerator")
    assert "tiny_plugin_mod" not in sys.modules  # listing names imports nothing
    strategy = resolve(accelerator="tiny", devices=1)
    assert isinstance(strategy, Strategy)
    assert type(strategy.accelerator).__name__ == "TinyAccelerator"
    assert type(strategy.accelerator).__module__ == "tiny_plugin_mod"
    [info] = [i for i in default_registry().list_components("accelerator") if i.name == "tiny"]
    assert (info.distribution, info.version) == ("tiny-plugin", "1.2.3")
    assert info.source == "tiny-plugin 1.2.3"
    assert info.description == "A tiny test accelerator that computes on the CPU."
    assert info.available is True and info.error is None


def test_clear_cache_sees_an_uninstalled_plugin_go(install_plugin: InstallPlugin) -> None:
    info = install_plugin(
        "tiny-plugin",
        "1.2.3",
        {"trainspec.accelerators": {"tiny": "tiny_plugin_mod:TinyAccelerator"}},
        {"tiny_plugin_mod": TINY_ACCELERATOR},
    )
    assert "tiny" in default_registry().names("accelerator")
    for file in info.iterdir():
        file.unlink()
    info.rmdir()
    assert "tiny" in default_registry().names("accelerator")  # cached
    default_registry().clear_cache()
    assert "tiny" not in default_registry().names("accelerator")


def test_the_same_name_from_two_distributions_is_an_error_naming_both(
    install_plugin: InstallPlugin,
) -> None:
    modules = {"tiny_plugin_mod": TINY_ACCELERATOR}
    install_plugin(
        "tiny-plugin",
        "1.0",
        {"trainspec.accelerators": {"tiny": "tiny_plugin_mod:TinyAccelerator"}},
        modules,
    )
    install_plugin(
        "other-plugin",
        "2.0",
        {"trainspec.accelerators": {"tiny": "tiny_plugin_mod:TinyAccelerator"}},
    )
    with pytest.raises(ConfigurationError) as info:
        default_registry().get("accelerator", "tiny")
    assert "tiny-plugin" in str(info.value) and "other-plugin" in str(info.value)
    with pytest.raises(ConfigurationError, match="more than once"):
        resolve(accelerator="tiny")
    listed = [i for i in default_registry().list_components("accelerator") if i.name == "tiny"]
    assert {i.distribution for i in listed} == {"tiny-plugin", "other-plugin"}
    assert all(i.error and "more than once" in i.error for i in listed)


def test_a_plugin_reusing_a_built_in_name_is_an_error(install_plugin: InstallPlugin) -> None:
    install_plugin(
        "shadow-plugin",
        "0.1",
        {"trainspec.precisions": {"32-true": "shadow_mod:Precision"}},
        {"shadow_mod": "Precision = object\n"},
    )
    with pytest.raises(ConfigurationError) as info:
        default_registry().get("precision", "32-true")
    assert "shadow-plugin" in str(info.value) and "trainspec" in str(info.value)


def test_a_broken_plugin_raises_on_get_but_not_on_list(install_plugin: InstallPlugin) -> None:
    install_plugin(
        "broken-plugin",
        "0.1",
        {
            "trainspec.accelerators": {
                "broken": "broken_mod:Missing",
                "raising": "raising_mod:Raising",
            }
        },
        {
            "broken_mod": "import a_module_that_does_not_exist_anywhere\n",
            "raising_mod": """
                from trainspec.reference.accelerators.cpu import CPUAccelerator

                class Raising(CPUAccelerator):
                    def is_available(self) -> bool:
                        raise RuntimeError("driver exploded")
            """,
        },
    )
    with pytest.raises(ConfigurationError, match="broken_mod:Missing"):
        default_registry().get("accelerator", "broken")
    infos = {i.name: i for i in default_registry().list_components("accelerator")}
    assert infos["broken"].available is False
    assert infos["broken"].error and "ModuleNotFoundError" in infos["broken"].error
    assert infos["raising"].available is None
    assert infos["raising"].error and "driver exploded" in infos["raising"].error
    # "auto" skips both and still finds an accelerator
    assert resolve(devices=1).accelerator.is_available()


def test_programmatic_registration() -> None:
    registry = Registry()

    def factory() -> Float32Precision:
        """My precision."""
        return Float32Precision()

    registry.register("precision", "my-flag", factory)
    assert registry.get("precision", "my-flag") is factory
    [info] = [i for i in registry.list_components("precision") if i.name == "my-flag"]
    assert info.distribution is None and info.source == "registered programmatically"
    assert info.description == "My precision."
    assert info.object_path.endswith("factory")
    with pytest.raises(ConfigurationError, match="replace=True"):
        registry.register("precision", "my-flag", Float32Precision)
    registry.register("precision", "my-flag", Float32Precision, replace=True)
    assert registry.get("precision", "my-flag") is Float32Precision
    registry.clear_cache()
    assert registry.get("precision", "my-flag") is Float32Precision  # survives clear_cache
    registry.unregister("precision", "my-flag")
    with pytest.raises(ConfigurationError):
        registry.get("precision", "my-flag")


def test_registering_over_an_entry_point_is_refused_naming_its_source() -> None:
    with pytest.raises(ConfigurationError, match="trainspec"):
        Registry().register("precision", "32-true", Float32Precision)


@pytest.mark.parametrize(("name", "factory"), [("", Float32Precision), ("x", 3)])
def test_register_validates_its_arguments(name: str, factory: object) -> None:
    with pytest.raises(ConfigurationError):
        Registry().register("precision", name, factory)  # type: ignore[arg-type]


def test_concurrent_lookups_agree() -> None:
    registry = Registry()
    results: list[object] = []
    errors: list[BaseException] = []

    def look_up() -> None:
        try:
            for _ in range(20):
                results.append(registry.get("checkpoint_io", "memory"))
        except BaseException as error:  # collected and asserted below
            errors.append(error)

    threads = [threading.Thread(target=look_up) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not errors
    assert len(results) == 120 and len({id(r) for r in results}) == 1
