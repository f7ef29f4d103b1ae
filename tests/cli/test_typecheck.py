"""``trainspec typecheck``: mypy --strict decides whether a class satisfies its protocols, and
each mismatch is named by protocol member and spec clause."""

from __future__ import annotations

import sys
import textwrap
from typing import TYPE_CHECKING, Any

import pytest

from trainspec import AsyncCheckpointIO, CheckpointIO, ConfigurationError, Strategy
from trainspec.conformance.typecheck import (
    INSTALL_HINT,
    claimed_protocols,
    protocol_by_name,
    typecheck,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from pathlib import Path

pytestmark = pytest.mark.timeout(600)  # the first mypy run analyses torch's stubs

WRONG_IO = '''
from __future__ import annotations

from typing import Any

import trainspec


class WrongIO:
    """Satisfies CheckpointIO structurally, except for three members."""

    def save_checkpoint(
        self,
        checkpoint: dict[str, Any],
        path: str | trainspec.PathLike,
        storage_options: trainspec.StorageOptions = None,
    ) -> None: ...

    def load_checkpoint(self, path: str) -> dict[str, Any]:  # narrower path, no map_location
        return {}

    def remove_checkpoint(self, path: trainspec.PathLike) -> int:  # returns int, not None
        return 0

    # teardown is missing


class HalfIO(trainspec.CheckpointIO):
    """Subclasses the protocol but leaves members abstract."""

    def teardown(self) -> None: ...
'''


@pytest.fixture
def wrong_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A module with deliberately wrong classes in ``tmp_path``, the current directory."""
    name = f"wrong_io_{tmp_path.name.replace('-', '_')}"
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(WRONG_IO), encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield name
    sys.modules.pop(name, None)


def test_typecheck_passes_a_reference_implementation(trainspec_cli: Callable[..., Any]) -> None:
    result = trainspec_cli(
        "typecheck", "trainspec.reference.checkpoint_io.torch_io:TorchCheckpointIO"
    )
    assert result.code == 0, result.out + result.err
    assert "satisfies trainspec.CheckpointIO" in result.out


def test_typecheck_passes_the_example_plugin(trainspec_cli: Callable[..., Any]) -> None:
    for target in (
        "trainspec_example.compressed_io:CompressedCheckpointIO",
        "trainspec_example.vcpu:VirtualCPUAccelerator",
    ):
        result = trainspec_cli("typecheck", target)
        assert result.code == 0, result.out + result.err


def test_typecheck_names_each_mismatched_member_with_its_clauses(
    trainspec_cli: Callable[..., Any], wrong_module: str
) -> None:
    result = trainspec_cli("typecheck", f"{wrong_module}:WrongIO", "--protocol", "CheckpointIO")
    assert result.code == 1, result.out + result.err
    out = result.out
    for member in ("load_checkpoint", "remove_checkpoint", "teardown"):
        assert f"CheckpointIO.{member}" in out, member
    assert "CheckpointIO.save_checkpoint" not in out  # the one member that is right
    assert "CKPT-12" in out and "missing" in out
    assert "3 mismatches" in out


def test_typecheck_api_reports_expected_and_actual_types(wrong_module: str) -> None:
    module = __import__(wrong_module)
    result = typecheck(module.WrongIO, [CheckpointIO])
    assert not result.ok
    assert result.protocols == ("CheckpointIO",)
    by_member = {m.member: m for m in result.mismatches}
    assert set(by_member) == {"load_checkpoint", "remove_checkpoint", "teardown"}
    assert by_member["teardown"].got == "missing"
    assert by_member["teardown"].clauses == ("CKPT-12",)
    remove = by_member["remove_checkpoint"]
    assert "-> None" in remove.expected and "-> int" in remove.got
    assert "CKPT-11" in remove.clauses
    assert "map_location" in by_member["load_checkpoint"].expected
    assert "_instance()" in result.source and "error" in result.mypy_output


def test_typecheck_names_members_left_abstract_by_a_subclass(wrong_module: str) -> None:
    module = __import__(wrong_module)
    result = typecheck(module.HalfIO)
    members = {m.member for m in result.mismatches}
    assert members == {"save_checkpoint", "load_checkpoint", "remove_checkpoint"}
    assert all("abstract" in m.got for m in result.mismatches)


def test_claimed_protocols_keep_the_most_derived() -> None:
    from trainspec.reference.checkpoint_io.background import BackgroundCheckpointIO
    from trainspec.reference.strategies.ddp import DDPStrategy

    assert claimed_protocols(BackgroundCheckpointIO) == [AsyncCheckpointIO]
    assert claimed_protocols(BackgroundCheckpointIO, [CheckpointIO]) == [AsyncCheckpointIO]
    assert Strategy in claimed_protocols(DDPStrategy)
    assert claimed_protocols(int) == []


@pytest.mark.parametrize(
    ("name", "expected"),
    [("CheckpointIO", CheckpointIO), ("trainspec.Strategy", Strategy), ("strategy", Strategy)],
)
def test_protocol_by_name_accepts_names_and_kinds(name: str, expected: type) -> None:
    assert protocol_by_name(name) is expected


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["no_such_module_q:Thing"], "no_such_module_q"),
        (["trainspec.reference.checkpoint_io.torch_io"], "module:attribute"),
        (["trainspec.reference.checkpoint_io:torch_io"], "not a class"),
        (["builtins:int"], "builtins"),
        (["collections:OrderedDict"], "--protocol"),
        (["collections:OrderedDict", "--protocol", "Checkpoint"], "unknown protocol"),
        ([], "TARGET"),
    ],
)
def test_typecheck_bad_arguments_are_one_line_usage_errors(
    trainspec_cli: Callable[..., Any],
    usage_error: Callable[..., str],
    argv: list[str],
    needle: str,
) -> None:
    line = usage_error(trainspec_cli("typecheck", *argv), "typecheck")
    assert needle in line


def test_typecheck_without_mypy_says_how_to_install_it(
    trainspec_cli: Callable[..., Any],
    usage_error: Callable[..., str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "mypy", None)
    with pytest.raises(ConfigurationError, match="pip install mypy"):
        typecheck(CheckpointIO)
    line = usage_error(
        trainspec_cli("typecheck", "trainspec.reference.checkpoint_io.torch_io:TorchCheckpointIO"),
        "typecheck",
    )
    assert INSTALL_HINT in line
    assert "trainspec[typecheck]" in line  # the extra that brings mypy
