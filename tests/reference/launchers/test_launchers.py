"""The reference launchers start ranks, return rank 0's result and stop everything on a
failure, naming the rank (LAUNCH-1 ... LAUNCH-4).

Each case runs ``launch_cases.py`` once, which starts three ranks that import no torch.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import types
from pathlib import Path

import psutil
import pytest

from trainspec import ConfigurationError, Launcher, LaunchError
from trainspec.reference.launchers import (
    MultiprocessingLauncher,
    SubprocessScriptLauncher,
    XLALauncher,
    script_command,
)

SCRIPT = Path(__file__).with_name("launch_cases.py")


def run_case(kind: str, case: str, workdir: Path) -> dict[str, object]:
    environment = {
        name: value
        for name, value in os.environ.items()
        if name not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")
    }
    completed = subprocess.run(
        [sys.executable, str(SCRIPT), kind, case, str(workdir)],
        capture_output=True,
        text=True,
        timeout=240,
        env=environment,
        check=False,
    )
    lines = [line for line in completed.stdout.splitlines() if line.startswith("RESULT ")]
    assert completed.returncode == 0 and len(lines) == 1, completed.stdout + completed.stderr
    outcome: dict[str, object] = json.loads(lines[0].removeprefix("RESULT "))
    return outcome


def assert_dead(pid: int) -> None:
    """``pid`` (not a child of this process) is gone, or dead and not yet reaped by init."""
    try:
        status = psutil.Process(pid).status()
    except psutil.NoSuchProcess:
        return
    assert status == psutil.STATUS_ZOMBIE, f"process {pid} outlived the launch"


def assert_everything_stopped(outcome: dict[str, object], workdir: Path) -> None:
    assert outcome["alive_children"] == []
    assert outcome["rank_variable_left"] is False
    assert not (workdir / "rank-2-finished").exists()
    assert_dead(int((workdir / "grandchild.pid").read_text()))
    for helper in workdir.glob("helper-of-rank-*.pid"):
        assert_dead(int(helper.read_text()))


@pytest.mark.parametrize("kind", ["script", "spawn"])
def test_launch_runs_every_rank_and_returns_rank_zero_result(kind: str, tmp_path: Path) -> None:
    outcome = run_case(kind, "ok", tmp_path)
    seen = [json.loads((tmp_path / f"rank-{rank}.json").read_text()) for rank in range(3)]
    assert [entry["RANK"] for entry in seen] == ["0", "1", "2"]
    assert [entry["LOCAL_RANK"] for entry in seen] == ["0", "1", "2"]
    assert {entry["WORLD_SIZE"] for entry in seen} == {"3"}
    assert len({(entry["MASTER_ADDR"], entry["MASTER_PORT"]) for entry in seen}) == 1
    assert outcome["result"] == seen[0]
    assert outcome["alive_children"] == []
    assert outcome["rank_variable_left"] is False
    # What ranks 1 and 2 left running in their process groups was stopped as well.
    helpers = sorted(tmp_path.glob("helper-of-rank-*.pid"))
    assert [path.name for path in helpers] == ["helper-of-rank-1.pid", "helper-of-rank-2.pid"]
    for helper in helpers:
        assert_dead(int(helper.read_text()))


@pytest.mark.parametrize(
    ("kind", "case", "rank", "expected"),
    [
        ("script", "raise", 1, "ValueError: boom from rank 1"),
        ("script", "exit", 1, "exited with code 7"),
        ("script", "segv", 1, "SIGSEGV"),
        ("script", "rank0", 0, "RuntimeError: boom from rank 0"),
        ("script", "blame", 1, "ValueError: boom from rank 1"),
        ("spawn", "raise", 1, "ValueError: boom from rank 1"),
        ("spawn", "exit", 1, "exited with code 7"),
        ("spawn", "segv", 1, "SIGSEGV"),
        ("spawn", "rank0", 0, "RuntimeError: boom from rank 0"),
        ("spawn", "blame", 1, "ValueError: boom from rank 1"),
    ],
)
def test_a_failing_rank_stops_the_others_and_is_named(
    kind: str, case: str, rank: int, expected: str, tmp_path: Path
) -> None:
    outcome = run_case(kind, case, tmp_path)
    assert outcome["error"] == "LaunchError"
    assert outcome["rank"] == rank
    message = str(outcome["message"])
    assert f"rank {rank}" in message
    assert expected in message
    if expected.endswith(("1", "0")):  # a raised exception: its traceback comes along
        assert "Traceback (most recent call last)" in message
    if case in ("exit", "segv"):  # rank 1 started a helper before it died
        assert (tmp_path / "helper-of-rank-1.pid").exists()
    assert_everything_stopped(outcome, tmp_path)


@pytest.mark.parametrize("kind", ["script", "spawn"])
def test_a_rank_still_running_after_a_peer_timed_out_is_blamed_as_hung(
    kind: str, tmp_path: Path
) -> None:
    # Rank 0's collective times out (a secondary error), rank 1 succeeds, rank 2 sleeps on.
    outcome = run_case(kind, "hang", tmp_path)
    assert outcome["error"] == "LaunchError"
    assert outcome["rank"] == 2
    message = str(outcome["message"])
    assert message.splitlines()[0].startswith("rank 2 is presumed hung"), message
    # Where it hung (faulthandler's dump of its threads) ...
    assert "rank 2's threads when it was stopped" in message
    assert "in work" in message and "launch_cases.py" in message
    # ... and the timeout of rank 0, kept as context.
    assert "rank 0 failed with:" in message
    assert "CollectiveTimeoutError: simulated: all_reduce did not complete" in message
    assert_everything_stopped(outcome, tmp_path)


def test_launchers_are_explicit_launchers() -> None:
    script = SubprocessScriptLauncher(2)
    spawned = MultiprocessingLauncher(2)
    for launcher in (script, spawned):
        assert Launcher in type(launcher).__mro__
        assert isinstance(launcher, Launcher)
    assert script.is_interactive_compatible is False
    assert spawned.is_interactive_compatible is False
    assert MultiprocessingLauncher(2, "fork").is_interactive_compatible is True


@pytest.mark.parametrize("count", [0, -1, 1.5, True, "2"])
def test_launchers_refuse_a_bad_process_count(count: object) -> None:
    with pytest.raises(ConfigurationError, match="num_processes"):
        SubprocessScriptLauncher(count)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="num_processes"):
        MultiprocessingLauncher(count)  # type: ignore[arg-type]


def test_multiprocessing_launcher_refuses_an_unknown_start_method() -> None:
    with pytest.raises(ConfigurationError, match="start_method"):
        MultiprocessingLauncher(2, "thread")  # type: ignore[arg-type]


def test_multiprocessing_launcher_refuses_an_unpicklable_function_before_starting() -> None:
    launcher = MultiprocessingLauncher(2)
    before = psutil.Process().children(recursive=True)
    with pytest.raises(ConfigurationError, match="picklable"):
        launcher.launch(lambda: 1)
    assert psutil.Process().children(recursive=True) == before


def test_one_process_runs_in_this_process_and_wraps_a_failure() -> None:
    launcher = SubprocessScriptLauncher(1)
    assert launcher.launch(pow, 2, 5) == 32

    def fail() -> None:
        raise KeyError("missing")

    with pytest.raises(LaunchError, match="rank 0") as caught:
        launcher.launch(fail)
    assert caught.value.rank == 0
    assert isinstance(caught.value.__cause__, KeyError)


def test_script_command_refuses_an_interactive_session(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "__main__", types.ModuleType("__main__"))
    with pytest.raises(ConfigurationError, match="interactive"):
        script_command()


def test_script_command_reruns_a_module_with_dash_m(monkeypatch: pytest.MonkeyPatch) -> None:
    main = types.ModuleType("__main__")
    main.__file__ = "/somewhere/pkg/tool/__main__.py"
    main.__spec__ = types.SimpleNamespace(name="pkg.tool.__main__")  # type: ignore[assignment]
    monkeypatch.setitem(sys.modules, "__main__", main)
    monkeypatch.setattr(sys, "argv", ["/somewhere/pkg/tool/__main__.py", "--flag", "x"])
    assert script_command() == [sys.executable, "-m", "pkg.tool", "--flag", "x"]


@pytest.mark.skipif(
    importlib.util.find_spec("torch_xla") is not None, reason="checks the behaviour without it"
)
def test_xla_launcher_needs_torch_xla_and_starts_nothing_without_it() -> None:
    launcher = XLALauncher(2)
    assert isinstance(launcher, Launcher) and launcher.is_interactive_compatible is False
    before = psutil.Process().children(recursive=True)
    with pytest.raises(ConfigurationError, match="torch_xla"):
        launcher.launch(pow, 2, 3)
    assert psutil.Process().children(recursive=True) == before
    with pytest.raises(ConfigurationError, match="start_method"):
        XLALauncher(2, "forkserver")  # type: ignore[arg-type]
