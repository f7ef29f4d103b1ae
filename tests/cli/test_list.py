"""``trainspec list``: built-in and plugin components, with their source and availability."""

from __future__ import annotations

import json
import sys
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING, Any

import pytest

from trainspec.conformance import _cli_list
from trainspec.reference.registry import REGISTRY_KINDS, default_registry

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from pathlib import Path

BUILTINS = {
    "accelerator": {"cpu", "cuda", "xla"},
    "strategy": {"single_device", "ddp"},
    "precision": {"32-true", "64-true", "16-true", "bf16-true", "16-mixed", "bf16-mixed"},
    "checkpoint_io": {"torch", "async", "memory", "safetensors"},
    "cluster_environment": {"local", "torchelastic", "slurm"},
}


@pytest.fixture(scope="module")
def example_version() -> str:
    """The installed example plugin's version; the tests below are about seeing it."""
    try:
        return version("trainspec-example")
    except PackageNotFoundError:
        pytest.fail(
            "the example plugin is not installed: pip install --no-build-isolation --no-deps "
            "-e examples/trainspec_example (scripts/setup-env.sh does it)",
            pytrace=False,
        )


def _rows(result_out: str) -> list[dict[str, object]]:
    rows = json.loads(result_out)
    assert isinstance(rows, list)
    return rows


def test_list_kinds_are_the_registry_kinds() -> None:
    assert _cli_list._KINDS == REGISTRY_KINDS


def test_list_json_has_every_builtin_and_the_example_plugin(
    trainspec_cli: Callable[..., Any], example_version: str
) -> None:
    result = trainspec_cli("list", "--json")
    assert result.code == 0, result.err
    rows = _rows(result.out)
    names = {(row["kind"], row["name"]) for row in rows}
    for kind, expected in BUILTINS.items():
        assert {(kind, name) for name in expected} <= names, kind
    by_name = {(row["kind"], row["name"]): row for row in rows}
    vcpu = by_name["accelerator", "vcpu"]
    assert vcpu["distribution"] == "trainspec-example"
    assert vcpu["version"] == example_version
    assert vcpu["object_path"] == "trainspec_example.vcpu:VirtualCPUAccelerator"
    assert vcpu["available"] is True
    gzip_io = by_name["checkpoint_io", "gzip"]
    assert gzip_io["source"] == f"trainspec-example {example_version}"
    assert gzip_io["available"] is None and gzip_io["loadable"] is True
    cpu = by_name["accelerator", "cpu"]
    assert cpu["distribution"] == "trainspec" and cpu["available"] is True
    assert cpu["description"]


def test_list_reports_accelerator_availability_on_this_machine(
    trainspec_cli: Callable[..., Any],
) -> None:
    from trainspec.reference.accelerators.cuda import CUDAAccelerator

    rows = _rows(trainspec_cli("list", "--json", "--kind", "accelerator").out)
    assert {row["kind"] for row in rows} == {"accelerator"}
    by_name = {row["name"]: row for row in rows}
    assert by_name["cuda"]["available"] is CUDAAccelerator().is_available()
    for row in rows:
        assert isinstance(row["available"], bool), row


def test_list_table_shows_names_sources_and_availability(
    trainspec_cli: Callable[..., Any], example_version: str
) -> None:
    result = trainspec_cli("list")
    assert result.code == 0, result.err
    out: str = result.out
    for names in BUILTINS.values():
        for name in names:
            assert f" {name} " in out, name
    vcpu_line = next(line for line in out.splitlines() if " vcpu " in line)
    assert f"trainspec-example {example_version}" in vcpu_line
    assert " yes " in vcpu_line
    gzip_line = next(line for line in out.splitlines() if " gzip " in line)
    assert "checkpoint_io" in gzip_line and " - " in gzip_line


def test_list_table_wraps_each_description_instead_of_cutting_its_sentence(
    trainspec_cli: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    import inspect

    from trainspec.reference.strategies.ddp import DDPStrategy

    # The docstring's first sentence runs over two source lines; the table shows all of it.
    paragraph = " ".join((inspect.getdoc(DDPStrategy) or "").split("\n\n")[0].split())
    assert "\n" in (inspect.getdoc(DDPStrategy) or "").split("\n\n")[0]
    monkeypatch.setenv("COLUMNS", "400")  # wide enough for one row per component
    out = trainspec_cli("list", "--kind", "strategy").out
    ddp_line = next(line for line in out.splitlines() if "│ ddp " in line)
    assert paragraph.replace("`", "")[-30:] in ddp_line.replace("`", ""), ddp_line


def test_list_kind_filter_accepts_several_kinds(trainspec_cli: Callable[..., Any]) -> None:
    result = trainspec_cli("list", "--json", "--kind", "precision,checkpoint_io")
    rows = _rows(result.out)
    assert {row["kind"] for row in rows} == {"precision", "checkpoint_io"}


@pytest.mark.parametrize("kind", ["accelerators", "environment", ""])
def test_list_unknown_kind_is_a_usage_error_naming_the_valid_kinds(
    trainspec_cli: Callable[..., Any], usage_error: Callable[..., str], kind: str
) -> None:
    line = usage_error(trainspec_cli("list", "--kind", kind), "list")
    assert repr(kind) in line
    for valid in REGISTRY_KINDS:
        assert valid in line


@pytest.fixture
def broken_plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A distribution whose accelerator entry point names a module that does not exist."""
    info = tmp_path / "broken_plugin-1.2.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: broken-plugin\nVersion: 1.2\n", encoding="utf-8"
    )
    (info / "entry_points.txt").write_text(
        "[trainspec.accelerators]\nbroken = no_such_module_xyz:Accelerator\n", encoding="utf-8"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    default_registry().clear_cache()
    yield "broken"
    monkeypatch.undo()
    sys.modules.pop("no_such_module_xyz", None)
    default_registry().clear_cache()


def test_list_reports_a_broken_plugin_in_its_row_without_failing(
    trainspec_cli: Callable[..., Any], broken_plugin: str
) -> None:
    result = trainspec_cli("list", "--json", "--kind", "accelerator")
    assert result.code == 0, result.err
    row = next(r for r in _rows(result.out) if r["name"] == broken_plugin)
    assert row["distribution"] == "broken-plugin"
    assert row["loadable"] is False and row["available"] is False
    assert "no_such_module_xyz" in str(row["error"])
    table = trainspec_cli("list", "--kind", "accelerator")
    assert table.code == 0
    assert "no_such_module_xyz" in table.out
    assert "Traceback" not in table.out + table.err
