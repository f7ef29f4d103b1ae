"""Run ``trainspec`` subcommands in this process (``trainspec_cli``) or in a new one
(``cli_command``), through ``trainspec.conformance.cli.main`` once it lists the subcommand,
and through ``_standalone_cli.py`` (the same parser and error handling) until then."""

from __future__ import annotations

import importlib.util
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from collections.abc import Callable
    from types import ModuleType

HERE = Path(__file__).resolve().parent
STANDALONE = HERE / "_standalone_cli.py"


@dataclass(frozen=True)
class CliResult:
    """What one ``trainspec`` invocation returned and printed."""

    code: int
    out: str
    err: str


def is_wired(command: str) -> bool:
    """Whether ``trainspec.conformance.cli`` lists the subcommand's module."""
    from trainspec.conformance import cli

    return f"trainspec.conformance._cli_{command}" in cli.COMMAND_MODULES


def _standalone() -> ModuleType:
    spec = importlib.util.spec_from_file_location("_trainspec_standalone_cli", STANDALONE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def cli_command(*argv: str) -> list[str]:
    """The command line that runs ``trainspec <argv>`` in a new process."""
    if is_wired(argv[0]):
        return [sys.executable, "-m", "trainspec.conformance.cli", *argv]
    return [sys.executable, str(STANDALONE), *argv]


@pytest.fixture
def trainspec_cli(capsys: pytest.CaptureFixture[str]) -> Callable[..., CliResult]:
    """``trainspec_cli("list", "--json")`` runs ``trainspec list --json`` here."""

    def invoke(*argv: str) -> CliResult:
        if is_wired(argv[0]):
            from trainspec.conformance.cli import main

            code = main(list(argv))
        else:
            code = _standalone().main(list(argv))
        captured = capsys.readouterr()
        return CliResult(code, captured.out, captured.err)

    return invoke


def _assert_usage_error(result: CliResult, command: str) -> str:
    assert result.code == 2, result
    lines = result.err.strip().splitlines()
    assert len(lines) == 1, result.err
    # Errors found by the subcommand name it; argparse's own go through main, which may say
    # just "trainspec: error: ...".
    assert lines[0].startswith(("trainspec: error: ", f"trainspec {command}: error: ")), lines
    assert "Traceback" not in result.err + result.out
    return lines[0]


@pytest.fixture
def usage_error() -> Callable[[CliResult, str], str]:
    """``usage_error(result, "list")`` asserts exit status 2 and exactly one line on standard
    error (``trainspec list: error: ...``, no traceback) and returns that line."""
    return _assert_usage_error


@pytest.fixture
def command_line() -> Callable[..., list[str]]:
    """``command_line("demo", ...)``: the argv that runs ``trainspec demo ...`` in a new
    process."""
    return cli_command
