"""``trainspec verify`` and ``verify()`` refuse hostile timeouts and report paths cleanly.

Regression tests for the fuzzing findings ``cli-timeout`` (``--timeout inf`` / ``1e300`` /
``nan`` reached ``thread.join`` and raised ``OverflowError`` / ``ValueError`` out of
``main()``) and ``cli-report-path`` (``--json "r\\x00.json"`` raised ``ValueError: embedded
null byte`` out of ``main()``).
"""

from __future__ import annotations

import math
import os
import textwrap
import threading
from typing import TYPE_CHECKING, Any

import pytest

from trainspec import ConfigurationError
from trainspec.conformance import TargetSession, verify
from trainspec.conformance._cli_verify import timeout_seconds
from trainspec.conformance.cli import main

if TYPE_CHECKING:
    from pathlib import Path

MODULE = textwrap.dedent(
    """
    class GoodEnv:
        def detect(self): return True
        creates_processes_externally = False
        main_address = "127.0.0.1"
        main_port = 29500
        world_size = 1
        global_rank = 0
        local_rank = 0
        node_rank = 0
        def validate(self): pass
        def teardown(self): pass
    """
)
HOSTILE_TIMEOUTS = ("inf", "-inf", "nan", "1e300", "-1", "1e10", "soon", "")


@pytest.fixture
def target(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fake_checks: Any) -> str:
    """``hostile_opts_mod:GoodEnv``, a conforming environment with one passing fake check."""
    (tmp_path / "hostile_opts_mod.py").write_text(MODULE, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    fake_checks.add("ENV-1", name="check_env_one")
    return "hostile_opts_mod:GoodEnv"


def _error_line(capsys: pytest.CaptureFixture[str]) -> str:
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, captured.err
    assert "Traceback" not in captured.err + captured.out
    return lines[0]


@pytest.mark.parametrize("value", HOSTILE_TIMEOUTS)
def test_a_non_finite_or_out_of_range_timeout_is_a_usage_error(
    target: str, capsys: pytest.CaptureFixture[str], value: str
) -> None:
    code = main(["verify", "cluster_environment", target, f"--timeout={value}"])

    line = _error_line(capsys)
    assert code == 2
    assert line.startswith("trainspec verify: error: argument --timeout: ")
    assert "finite number of seconds" in line and "or 0" in line  # what is valid


@pytest.mark.parametrize(("value", "expected"), [("0", None), ("-0", None), ("2.5", 2.5)])
def test_valid_timeouts_parse(value: str, expected: float | None) -> None:
    assert timeout_seconds(value) == expected


def test_a_small_finite_timeout_still_runs(target: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["verify", "cluster_environment", target, "--timeout", "30"]) == 0
    assert "check_env_one" in capsys.readouterr().out


@pytest.mark.parametrize("flag", ["--json", "--junit"])
@pytest.mark.parametrize("path", ["r\x00.json", "."], ids=["nul-byte", "a-directory"])
def test_an_unwritable_report_path_is_a_usage_error(
    target: str, capsys: pytest.CaptureFixture[str], flag: str, path: str
) -> None:
    code = main(["verify", "cluster_environment", target, flag, path])

    line = _error_line(capsys)
    assert code == 2
    assert line.startswith(f"trainspec verify: error: {flag} ")
    assert ("NUL byte" if "\x00" in path else "is a directory, not a regular file") in line


@pytest.mark.parametrize("flag", ["--json", "--junit"])
@pytest.mark.parametrize("path", ["", "  "], ids=["empty", "blank"])
def test_an_empty_report_path_is_a_usage_error(
    target: str, capsys: pytest.CaptureFixture[str], flag: str, path: str
) -> None:
    code = main(["verify", "cluster_environment", target, flag, path])

    line = _error_line(capsys)
    assert code == 2
    assert f"{flag} needs a file path" in line


@pytest.mark.parametrize("flag", ["--json", "--junit"])
def test_a_fifo_or_device_report_path_is_refused_before_anything_runs(
    target: str, capsys: pytest.CaptureFixture[str], tmp_path: Path, flag: str
) -> None:
    fifo = tmp_path / "report.fifo"
    os.mkfifo(fifo)

    codes = [
        main(["verify", "cluster_environment", target, flag, where])
        for where in (str(fifo), os.devnull)
    ]

    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert codes == [2, 2]
    assert len(lines) == 2, captured.err
    assert f"{flag} '{fifo}' is a FIFO (named pipe), not a regular file" in lines[0]
    assert f"{flag} '{os.devnull}' is a character device, not a regular file" in lines[1]
    assert "check_env_one" not in captured.out  # nothing ran


def test_the_report_writers_refuse_a_fifo_without_blocking(tmp_path: Path) -> None:
    from trainspec.conformance.report import Report

    fifo = tmp_path / "late.fifo"
    os.mkfifo(fifo)
    report = Report(targets=())

    for write in (report.write_json, report.write_junit):
        with pytest.raises(OSError):  # ENXIO: no reader; never a hang
            write(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    try:
        with pytest.raises(OSError, match="a FIFO, not a regular file"):
            report.write_json(fifo)
    finally:
        os.close(reader)


@pytest.mark.parametrize(
    "timeout_s",
    [math.inf, -math.inf, math.nan, 1e300, threading.TIMEOUT_MAX * 2, 10**400, True, "5", 0, -1],
    ids=["inf", "-inf", "nan", "1e300", "beyond-timeout-max", "huge-int", "bool", "str", "zero",
         "negative"],
)  # fmt: skip
def test_verify_refuses_a_timeout_thread_join_cannot_take(
    fake_checks: Any, good_env: type, timeout_s: object
) -> None:
    fake_checks.add("ENV-1", name="check_env_one")

    with pytest.raises(ConfigurationError, match="timeout_s must be positive and finite") as caught:
        verify(("cluster_environment", good_env), timeout_s=timeout_s)  # type: ignore[arg-type]

    assert "None (no watchdog)" in str(caught.value)
    assert good_env.made == 0  # refused before anything ran


def test_target_session_accepts_an_int_timeout_and_none(fake_checks: Any, good_env: type) -> None:
    fake_checks.add("ENV-1", name="check_env_one")
    from trainspec.conformance import Target

    target = Target("cluster_environment", good_env)
    assert TargetSession(target, timeout_s=5).timeout_s == 5
    assert TargetSession(target, timeout_s=None).timeout_s is None
