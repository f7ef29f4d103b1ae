"""Fixtures that install tiny plugin distributions into a temporary ``sys.path`` entry: a
``<name>-<version>.dist-info`` directory (METADATA, entry_points.txt) plus a module, exactly
what ``pip install`` leaves behind, so ``importlib.metadata`` discovers them."""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from trainspec.reference.registry import default_registry

InstallPlugin = Callable[..., Path]


@pytest.fixture
def install_plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[InstallPlugin]:
    """``install_plugin(dist, version, entry_points: {group: {name: value}}, modules:
    {module_name: source})``: a distribution visible to ``importlib.metadata`` for this test."""
    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.syspath_prepend(str(site))
    module_names: list[str] = []

    def install(
        dist: str,
        version: str,
        entry_points: dict[str, dict[str, str]],
        modules: dict[str, str] | None = None,
    ) -> Path:
        info = site / f"{dist.replace('-', '_')}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(
            f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n", encoding="utf-8"
        )
        lines = []
        for group, names in entry_points.items():
            lines.append(f"[{group}]")
            lines.extend(f"{name} = {value}" for name, value in names.items())
            lines.append("")
        (info / "entry_points.txt").write_text("\n".join(lines), encoding="utf-8")
        for module_name, source in (modules or {}).items():
            (site / f"{module_name}.py").write_text(textwrap.dedent(source), encoding="utf-8")
            module_names.append(module_name)
        default_registry().clear_cache()
        return info

    yield install
    for module_name in module_names:
        sys.modules.pop(module_name, None)
    monkeypatch.undo()  # sys.path first, so the cache is rebuilt without the plugins
    default_registry().clear_cache()


TINY_ACCELERATOR = '''
from trainspec.reference.accelerators.cpu import CPUAccelerator


class TinyAccelerator(CPUAccelerator):
    """A tiny test accelerator that computes on the CPU.

    More text that is not part of the description.
    """
'''
