"""Hostile ``trainspec`` arguments are one-line usage errors that name the subcommand.

Regression tests for the fuzzing finding ``huge-int`` (``trainspec demo --devices=<5000
digits>`` crashed ``int()``), and for argparse errors inside a subcommand, which ``main``
printed as ``trainspec: error: ...`` without the subcommand's name.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from trainspec.conformance._cli_demo import parse_devices
from trainspec.conformance.cli import main

if TYPE_CHECKING:
    from collections.abc import Callable


def _error_line(capsys: pytest.CaptureFixture[str]) -> str:
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, captured.err
    assert "Traceback" not in captured.err + captured.out
    return lines[0]


@pytest.mark.parametrize(
    "argv",
    [
        ["demo", "--bogus"],
        ["demo", "--steps", "many"],
        ["demo", "--steps"],
        ["list", "--bogus"],
        ["typecheck"],
        ["typecheck", "json:dumps", "--bogus"],
        ["verify", "precision", "json:dumps", "--layer", "nope"],
        ["verify", "precision", "json:dumps", "--timeout", "soon"],
        ["verify", "precision", "json:dumps", "--bogus", "x"],
    ],
    ids=lambda argv: " ".join(argv),
)
def test_an_argparse_error_inside_a_subcommand_names_the_subcommand(
    capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    code = main(argv)

    line = _error_line(capsys)
    assert code == 2
    assert line.startswith(f"trainspec {argv[0]}: error: "), line
    assert f"see 'trainspec {argv[0]} --help'" in line


@pytest.mark.parametrize(
    "argv", [["--bogus"], ["frobnicate"], ["--bogus", "--other"]], ids=lambda argv: " ".join(argv)
)
def test_an_error_before_any_subcommand_names_trainspec_alone(
    capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    code = main(argv)

    line = _error_line(capsys)
    assert code == 2
    assert line.startswith("trainspec: error: "), line


@pytest.mark.parametrize(
    "devices",
    ["9" * 5000, "-" + "9" * 5000, "1," + "9" * 5000, "9" * 19],
    ids=["5000-digits", "negative-5000-digits", "index-list", "19-digits"],
)
def test_demo_with_a_device_request_of_too_many_digits_is_a_usage_error(
    trainspec_cli: Callable[..., object], usage_error: Callable[..., str], devices: str
) -> None:
    line = usage_error(
        trainspec_cli("demo", "--accelerator", "cpu", f"--devices={devices}"), "demo"
    )

    assert line.startswith("trainspec demo: error: ")
    assert "'auto'" in line  # the valid requests
    assert len(line) < 1000  # the request is quoted, not printed in full


@pytest.mark.parametrize(
    ("text", "expected"),
    [("2", 2), (" -1 ", -1), ("9" * 18, 10**18 - 1), ("9" * 19, "9" * 19), ("auto", "auto")],
)
def test_demo_devices_become_ints_only_when_they_fit(text: str, expected: object) -> None:
    assert parse_devices(text) == expected
