"""``trainspec verify`` ends in a verdict and a report whatever a target's import or factory
does: exit, interrupt, ``os._exit``, a segfault (issue 17 item 2); and Ctrl-C is one line,
exit status 130 (issue 17 item 10).

A user target is verified in a forked child process that the CLI supervises; these tests run
``main`` in this process (the fork inherits it) and one real ``trainspec verify`` process for
Ctrl-C.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from typing import TYPE_CHECKING

import jsonschema
import pytest

from trainspec.conformance.cli import main
from trainspec.conformance.report import json_schema

if TYPE_CHECKING:
    from pathlib import Path

PLUGIN = textwrap.dedent(
    """
    import os, sys, time

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

    def exits_5():
        sys.exit(5)

    def interrupts():
        raise KeyboardInterrupt

    def hard_exit():
        os._exit(0)

    def segfault():
        import ctypes
        ctypes.string_at(0)

    def uses_threads():
        import torch
        square = torch.randn(1500, 1500)
        assert float((square @ square).abs().sum()) > 0  # a parallel region in the child
        return GoodEnv()

    def hangs():
        with open(os.environ["SUPERVISION_MARKER"], "w") as marker:
            marker.write(str(os.getpid()))
        time.sleep(3600)
        return GoodEnv()
    """
)


@pytest.fixture
def plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Importable modules: ``supervised_plugin`` (factories that misbehave) and modules that
    exit or interrupt at import."""
    (tmp_path / "supervised_plugin.py").write_text(PLUGIN, encoding="utf-8")
    (tmp_path / "exits_at_import.py").write_text("import sys\nsys.exit(0)\n", encoding="utf-8")
    (tmp_path / "exits_5_at_import.py").write_text("import sys\nsys.exit(5)\n", encoding="utf-8")
    (tmp_path / "interrupts_at_import.py").write_text("raise KeyboardInterrupt\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _verify(plugin: Path, target: str, *extra: str) -> tuple[int, dict[str, object]]:
    report = plugin / "report.json"
    code = main(["verify", "cluster_environment", target, "--json", str(report), *extra])
    data = json.loads(report.read_text(encoding="utf-8"))
    jsonschema.Draft202012Validator(json_schema()).validate(data)
    return code, data


def _error_result(data: dict[str, object]) -> dict[str, str]:
    targets = data["targets"]
    assert isinstance(targets, list) and len(targets) == 1
    errors = [r for r in targets[0]["results"] if r["status"] == "error"]
    assert errors, targets[0]
    assert data["ok"] is False
    return errors[0]  # type: ignore[no-any-return]


@pytest.mark.parametrize(
    ("target", "cause"),
    [
        ("exits_at_import:GoodEnv", "importing the target raised SystemExit('0')"),
        ("exits_5_at_import:GoodEnv", "importing the target raised SystemExit('5')"),
        ("interrupts_at_import:GoodEnv", "importing the target raised KeyboardInterrupt"),
    ],
    ids=["sys.exit(0)", "sys.exit(5)", "KeyboardInterrupt"],
)
def test_an_import_that_exits_or_interrupts_is_an_error_verdict(
    plugin: Path, capsys: pytest.CaptureFixture[str], target: str, cause: str
) -> None:
    code, data = _verify(plugin, target)

    error = _error_result(data)
    out = capsys.readouterr().out
    assert code == 1
    assert error["check"] == "run:process"
    assert error["message"].startswith(cause)
    assert "FAILED" in out


@pytest.mark.parametrize("timeout", ["300", "0"], ids=["watchdog", "no-watchdog"])
@pytest.mark.parametrize(
    ("factory", "cause"),
    [("exits_5", "SystemExit"), ("interrupts", "KeyboardInterrupt")],
    ids=["sys.exit(5)", "KeyboardInterrupt"],
)
def test_a_factory_that_exits_or_interrupts_is_an_error_verdict(
    plugin: Path, factory: str, cause: str, timeout: str
) -> None:
    code, data = _verify(plugin, f"supervised_plugin:{factory}", "--timeout", timeout)

    error = _error_result(data)
    assert code == 1
    assert cause in error["message"]


def test_a_factory_calling_os_exit_0_is_an_error_verdict(plugin: Path) -> None:
    code, data = _verify(plugin, "supervised_plugin:hard_exit")

    error = _error_result(data)
    assert code == 1
    assert error["check"] == "run:process"
    assert "exited with status 0 before the kit could record a verdict" in error["message"]


def test_a_factory_that_segfaults_is_an_error_verdict_with_its_stack(
    plugin: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    code, data = _verify(plugin, "supervised_plugin:segfault")

    error = _error_result(data)
    assert code == 1
    assert "killed by SIGSEGV" in error["message"]
    assert "in segfault" in error["traceback"]  # faulthandler's Python stack
    assert "Segmentation fault" in capfd.readouterr().err  # the child's stderr, passed on


def test_a_conforming_target_still_passes_under_supervision(plugin: Path) -> None:
    code, data = _verify(plugin, "supervised_plugin:GoodEnv")

    assert code == 0
    assert data["ok"] is True


def test_usage_errors_found_while_loading_stay_one_line(
    plugin: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["verify", "cluster_environment", "supervised_plugin:GoodEnv", "--capability", "x"])

    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert len(err) == 1 and err[0].startswith("trainspec verify: error: unknown capability")


def test_ctrl_c_stops_the_run_with_one_line_and_status_130(plugin: Path) -> None:
    marker = plugin / "hanging.pid"
    env = {**os.environ, "SUPERVISION_MARKER": str(marker), "PYTHONPATH": str(plugin)}
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "trainspec.conformance.cli",
            "verify",
            "cluster_environment",
            "supervised_plugin:hangs",
            "--json",
            str(plugin / "never.json"),
        ],
        cwd=plugin,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 120
        while not (marker.exists() and marker.read_text()) and process.poll() is None:
            assert time.monotonic() < deadline, "the factory never ran"
            time.sleep(0.05)
        child = int(marker.read_text())
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()

    assert process.returncode == 130, (out, err)
    assert err.strip().splitlines() == ["trainspec verify: interrupted"], err
    assert "Traceback" not in out + err
    with pytest.raises(ProcessLookupError):  # the supervised child was stopped and reaped
        os.kill(child, 0)


def test_a_caller_that_already_used_torch_threads_still_gets_a_verdict(plugin: Path) -> None:
    import torch

    square = torch.randn(1500, 1500)
    assert float((square @ square).abs().sum()) > 0  # this process now has a thread team

    code, data = _verify(plugin, "supervised_plugin:uses_threads", "--timeout", "0")

    assert code == 0
    assert data["ok"] is True


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/status", encoding="utf-8") as status:
            state = next(line for line in status if line.startswith("State:"))
    except (OSError, StopIteration):
        return False
    return "Z" not in state.split()[1]  # a zombie waiting for its reaper is dead


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_the_supervised_process_dies_with_a_killed_cli(plugin: Path) -> None:
    marker = plugin / "orphan.pid"
    env = {**os.environ, "SUPERVISION_MARKER": str(marker), "PYTHONPATH": str(plugin)}
    argv = ["verify", "cluster_environment", "supervised_plugin:hangs", "--quiet"]
    process = subprocess.Popen(
        [sys.executable, "-m", "trainspec.conformance.cli", *argv],
        cwd=plugin,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 120
        while not (marker.exists() and marker.read_text()) and process.poll() is None:
            assert time.monotonic() < deadline, "the factory never ran"
            time.sleep(0.05)
        child = int(marker.read_text())
        process.kill()  # SIGKILL: the CLI cannot stop its child itself
        process.wait()
        deadline = time.monotonic() + 60
        while _alive(child) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(child)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
