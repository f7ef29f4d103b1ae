"""`trainspec verify`: exit codes 0/1/2, one-line usage errors, report files, matrix mode."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from trainspec.conformance import builtin_targets
from trainspec.conformance.builtin_targets import BuiltinTarget
from trainspec.conformance.cli import main
from trainspec.conformance.report import json_schema

MODULE = textwrap.dedent(
    """
    from trainspec.conformance import Target

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

    def make_env():
        return GoodEnv()

    def needs_argument(x):
        return GoodEnv()

    DECLARED = Target("cluster_environment", GoodEnv, name="declared", capabilities={"extra"})
    NOT_A_FACTORY = 42
    """
)


@pytest.fixture
def plugin_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """An importable module ``cli_plugin_mod`` holding targets; returns its name."""
    (tmp_path / "cli_plugin_mod.py").write_text(MODULE, encoding="utf-8")
    (tmp_path / "cli_broken_mod.py").write_text("raise RuntimeError('boom at import')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    return "cli_plugin_mod"


def _one_line_error(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


def test_conforming_target_exits_0(
    fake_checks: Any, plugin_module: str, capsys: pytest.CaptureFixture[str]
) -> None:
    fake_checks.add("ENV-1", name="check_env_one")

    code = main(["verify", "cluster_environment", f"{plugin_module}:GoodEnv"])

    out = capsys.readouterr().out
    assert code == 0
    assert "check_env_one" in out
    assert "PASSED" in out


def test_failing_target_exits_1(
    fake_checks: Any, plugin_module: str, failing: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    fake_checks.add("ENV-1", name="check_env_one", body=failing("ENV-1"))

    code = main(["verify", "cluster_environment", f"{plugin_module}:make_env", "--quiet"])

    out = capsys.readouterr().out
    assert code == 1
    assert "check_env_one" in out
    assert "FAILED" in out


def test_xfail_and_select_options(
    fake_checks: Any, plugin_module: str, failing: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    fake_checks.add("ENV-1", name="check_env_one", body=failing("ENV-1"))
    fake_checks.add("ENV-2", name="check_env_two", body=failing("ENV-2"))
    target = f"{plugin_module}:GoodEnv"

    assert main(["verify", "cluster_environment", target, "--xfail", "ENV-1=known bug"]) == 1
    assert (
        main(
            ["verify", "cluster_environment", target, "--xfail", "ENV-1=known", "--select", "ENV-1"]
        )
        == 0
    )
    assert "xfailed" in capsys.readouterr().out


def test_a_target_object_carries_its_capabilities(
    fake_checks: Any, plugin_module: str, capsys: pytest.CaptureFixture[str]
) -> None:
    fake_checks.add("ENV-1", name="check_env_needs_extra", requires=("extra",))

    declared = main(["verify", "cluster_environment", f"{plugin_module}:DECLARED"])
    undeclared = main(["verify", "cluster_environment", f"{plugin_module}:GoodEnv"])
    flagged = main(
        ["verify", "cluster_environment", f"{plugin_module}:GoodEnv", "--capability", "extra"]
    )

    assert (declared, undeclared, flagged) == (0, 1, 0)  # all skipped is a failure
    assert "declared" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (["verify", "gpu", "m:x"], "unknown kind 'gpu'; valid kinds: accelerator, precision"),
        (["verify", "cluster_environment", "no_such_module_xyz:X"], "cannot import module"),
        (["verify", "cluster_environment", "cli_broken_mod:X"], "RuntimeError: boom at import"),
        (["verify", "cluster_environment", "cli_plugin_mod:Missing"], "no attribute 'Missing'"),
        (["verify", "cluster_environment", "cli_plugin_mod"], "must be 'package.module:attribute'"),
        (["verify", "cluster_environment", "cli_plugin_mod:NOT_A_FACTORY"], "zero-argument"),
        (
            ["verify", "cluster_environment", "cli_plugin_mod:GoodEnv", "--xfail", "ENV-1"],
            "a reason is required",
        ),
        (
            ["verify", "cluster_environment", "cli_plugin_mod:GoodEnv", "--xfail", "ENV-77=r"],
            "unknown clause or check ID 'ENV-77'",
        ),
        (
            ["verify", "cluster_environment", "cli_plugin_mod:GoodEnv", "--capability", "turbo"],
            "unknown capability 'turbo'",
        ),
        (
            ["verify", "cluster_environment", "cli_plugin_mod:GoodEnv", "--bogus"],
            "unrecognized arguments: --bogus",
        ),
        (["verify", "--xfail", "ENV-1=r"], "need a TARGET"),
        (["verify", "accelerator", "--world-size", "2"], "need a TARGET"),
        (["frobnicate"], "invalid choice"),
        (
            ["verify", "cluster_environment", "cli_plugin_mod:GoodEnv", "--timeout", "-1"],
            "--timeout",
        ),
    ],
)
def test_usage_errors_exit_2_with_one_line(
    fake_checks: Any,
    plugin_module: str,
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    fragment: str,
) -> None:
    fake_checks.add("ENV-1", name="check_env_one")

    code = main(argv)

    line = _one_line_error(capsys.readouterr().err)
    assert code == 2
    assert line.startswith("trainspec")
    assert ": error: " in line
    assert fragment in line


def test_a_factory_needing_arguments_fails_the_structure_layer(
    fake_checks: Any, plugin_module: str, capsys: pytest.CaptureFixture[str]
) -> None:
    fake_checks.add("ENV-1", name="check_env_one")

    code = main(["verify", "cluster_environment", f"{plugin_module}:needs_argument"])

    assert code == 1
    assert "structure:factory" in capsys.readouterr().out


def test_help_describes_every_option(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    top = capsys.readouterr().out
    assert main(["verify", "--help"]) == 0
    verify_help = capsys.readouterr().out

    assert "verify" in top
    assert main([]) == 2  # no command: the help, on standard error
    assert "COMMAND" in capsys.readouterr().err
    for option in (
        "--capability",
        "--xfail",
        "--select",
        "--json",
        "--junit",
        "--quiet",
        "--timeout",
    ):
        assert option in verify_help
    assert "Exit status:" in verify_help
    for code in ("0 ", "1 ", "2 ", "3 ", "130 "):  # the exit-status table
        assert f"\n  {code}" in verify_help


def test_json_and_junit_reports_are_written(
    fake_checks: Any, plugin_module: str, tmp_path: Path, failing: Any
) -> None:
    fake_checks.add("ENV-1", name="check_env_one")
    fake_checks.add("ENV-2", name="check_env_two", body=failing("ENV-2"))
    json_path = tmp_path / "reports" / "out.json"
    junit_path = tmp_path / "reports" / "junit.xml"

    code = main(
        [
            "verify",
            "cluster_environment",
            f"{plugin_module}:GoodEnv",
            "--json",
            str(json_path),
            "--junit",
            str(junit_path),
            "-q",
        ]
    )

    data = json.loads(json_path.read_text(encoding="utf-8"))
    jsonschema.Draft202012Validator(json_schema()).validate(data)
    suite = ET.parse(junit_path).getroot().find("testsuite")
    assert code == 1
    assert data["ok"] is False
    assert data["targets"][0]["name"] == f"{plugin_module}:GoodEnv"
    assert suite is not None and suite.get("failures") == "1"


def test_matrix_mode_runs_builtin_targets_and_skips_unimportable_ones(
    fake_checks: Any,
    plugin_module: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    fake_checks.add("ENV-1", name="check_env_one")
    monkeypatch.setattr(
        builtin_targets,
        "BUILTIN_TARGETS",
        (
            BuiltinTarget("cluster_environment", "good", f"{plugin_module}:GoodEnv"),
            BuiltinTarget("cluster_environment", "absent", "no_such_backend_xyz:Env"),
            BuiltinTarget("accelerator", "other-kind", "no_such_backend_xyz:Acc"),
        ),
    )
    json_path = tmp_path / "matrix.json"

    code = main(["verify", "cluster_environment", "--json", str(json_path)])

    out = capsys.readouterr().out
    data = json.loads(json_path.read_text(encoding="utf-8"))
    assert code == 0
    assert [t["name"] for t in data["targets"]] == ["good", "absent"]
    assert data["targets"][1]["skipped"].startswith("cannot import module 'no_such_backend_xyz'")
    assert "absent: skipped: cannot import" in out


def test_matrix_mode_fails_when_a_builtin_target_fails(
    fake_checks: Any,
    plugin_module: str,
    monkeypatch: pytest.MonkeyPatch,
    failing: Any,
    capsys: pytest.CaptureFixture[str],
) -> None:
    fake_checks.add("ENV-1", name="check_env_one", body=failing("ENV-1"))
    monkeypatch.setattr(
        builtin_targets,
        "BUILTIN_TARGETS",
        (
            BuiltinTarget("cluster_environment", "good", f"{plugin_module}:GoodEnv"),
            BuiltinTarget(
                "cluster_environment", "typo", f"{plugin_module}:GoodEnv", frozenset({"turbo"})
            ),
        ),
    )

    code = main(["verify"])

    out = capsys.readouterr().out
    assert code == 1
    assert "built-in target is misconfigured" in out


def test_builtin_table_names_known_kinds_and_module_paths() -> None:
    from trainspec.conformance.core import KINDS

    for entry in builtin_targets.BUILTIN_TARGETS:
        assert entry.kind in KINDS
        module, _, attr = entry.factory.partition(":")
        # Reference classes, or a small factory in the table's own module (it builds a
        # reference class with arguments, e.g. DDP with one device per rank of the world).
        assert module.startswith("trainspec.reference.") or module == builtin_targets.__name__
        assert attr


def test_console_script_smoke() -> None:
    script = Path(sys.executable).with_name("trainspec")
    if not script.exists():
        pytest.skip("the trainspec console script is not installed in this environment")

    version = subprocess.run(
        [str(script), "--version"], capture_output=True, text=True, timeout=120
    )
    usage = subprocess.run(
        [str(script), "verify", "no_such_kind", "x:y"], capture_output=True, text=True, timeout=120
    )

    assert version.returncode == 0
    assert version.stdout.startswith("trainspec ")
    assert usage.returncode == 2
    assert "unknown kind 'no_such_kind'" in _one_line_error(usage.stderr)


def test_builtin_rows_load_option_values_and_optional_capabilities(plugin_module: str) -> None:
    row = BuiltinTarget(
        "cluster_environment",
        "row",
        f"{plugin_module}:GoodEnv",
        capabilities=frozenset({"base"}),
        options={"plain": 1},
        option_refs={"values": "string:digits", "chosen": "builtins:frozenset"},
        optional_capabilities={"with_json": "json", "with_missing": "no_such_module_xyz"},
    )

    target = row.load()

    assert target.capabilities == frozenset({"base", "with_json"})
    assert target.options == {"plain": 1, "values": "0123456789", "chosen": frozenset}
    assert target.name == "row"


def test_a_broken_subcommand_module_costs_only_its_own_command(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from trainspec.conformance import cli

    monkeypatch.setattr(
        cli, "COMMAND_MODULES", ("trainspec.conformance._cli_verify", "no_such_cli_module_xyz")
    )

    code = main(["verify", "--help"])

    captured = capsys.readouterr()
    assert code == 0
    assert "--capability" in captured.out
    assert "no_such_cli_module_xyz is broken and left out" in captured.err


def test_world_size_refuses_a_kind_that_runs_in_one_process(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code = main(
        [
            "verify",
            "accelerator",
            "trainspec.reference.accelerators.cpu:CPUAccelerator",
            "--world-size",
            "2",
        ]
    )
    assert code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "collective" in err and "strategy" in err


@pytest.mark.distributed
def test_world_size_runs_a_collective_on_two_ranks(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report = tmp_path / "report.json"
    code = main(
        [
            "verify",
            "collective",
            "trainspec.reference.collectives.torch_dist:TorchCollective",
            "--world-size",
            "2",
            "--select",
            "COLL-6,COLL-8",
            "--json",
            str(report),
            "--quiet",
        ]
    )
    assert code == 0, capsys.readouterr().out
    data = json.loads(report.read_text())
    layers = {r["layer"] for t in data["targets"] for r in t["results"]}
    assert "distributed" in layers
    assert all(r["status"] != "failed" for t in data["targets"] for r in t["results"])


# -- issue 15: plugin text printed literally, reports before the table, 80 columns -------------

BRACKETS = "gloo [/bold] [rank0]: connect [Errno 111] [red]refused[/red] [link=x]"


def _bracket_failure(target: Any) -> None:
    from trainspec.conformance.core import CheckFailure

    target.make()
    raise CheckFailure(
        "ENV-1",
        expected="connect",
        actual=BRACKETS,
        snippet="    print('[/dim] literal')",
        subject=target.display_name,
    )


@pytest.mark.parametrize("mode", [[], ["--quiet"], ["--show-repro"]])
def test_square_brackets_in_a_failure_are_printed_literally(
    fake_checks: Any,
    plugin_module: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    mode: list[str],
) -> None:
    fake_checks.add("ENV-1", name="check_env_one", body=_bracket_failure)
    json_path = tmp_path / "r.json"
    junit_path = tmp_path / "r.xml"

    code = main(
        [
            "verify",
            "cluster_environment",
            f"{plugin_module}:GoodEnv",
            "--json",
            str(json_path),
            "--junit",
            str(junit_path),
            *mode,
        ]
    )

    captured = capsys.readouterr()
    assert code == 1, captured.err
    assert "Traceback" not in captured.err
    assert BRACKETS in " ".join(captured.out.split()).replace("│ ", "")
    assert BRACKETS in json_path.read_text(encoding="utf-8")
    assert junit_path.exists()
    if "--show-repro" in mode:
        assert "print('[/dim] literal')" in captured.out


def test_matrix_prints_brackets_in_names_and_messages_literally(
    fake_checks: Any,
    plugin_module: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    fake_checks.add("ENV-1", name="check_env_one", body=_bracket_failure)
    monkeypatch.setattr(
        builtin_targets,
        "BUILTIN_TARGETS",
        (BuiltinTarget("cluster_environment", "[/red]odd[bold]", f"{plugin_module}:GoodEnv"),),
    )

    code = main(["verify", "--show-repro"])

    out = capsys.readouterr().out
    assert code == 1
    assert "[/red]odd[bold]" in out
    assert BRACKETS in " ".join(out.split())  # the line may wrap at a space
    assert "print('[/dim] literal')" in out


def test_a_renderer_crash_keeps_the_reports_and_exits_3_with_one_line(
    fake_checks: Any,
    plugin_module: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from trainspec.conformance.report import Report

    def broken_render(self: Report, *args: object, **kwargs: object) -> None:
        raise RuntimeError("the table broke")

    fake_checks.add("ENV-1", name="check_env_one")
    monkeypatch.setattr(Report, "render", broken_render)
    json_path = tmp_path / "r.json"

    code = main(
        ["verify", "cluster_environment", f"{plugin_module}:GoodEnv", "--json", str(json_path)]
    )

    captured = capsys.readouterr()
    assert code == 3
    assert json.loads(json_path.read_text(encoding="utf-8"))["ok"] is True
    line = _one_line_error(captured.err)
    assert line.startswith("trainspec verify: error: the kit could not draw the results table")
    assert "RuntimeError: the table broke" in line
    assert str(json_path) in line
    assert captured.out.rstrip().endswith("PASSED")  # the plain summary still says it


LONG_NAMES = (
    "check_strategy_save_checkpoint_writes_a_complete_checkpoint_before_returning",
    "check_collective_operations_leave_inputs_unchanged_and_return_new_tensors",
    "check_env_one",
)


@pytest.mark.parametrize("quiet", [False, True])
def test_check_names_are_never_broken_at_80_columns(
    fake_checks: Any,
    plugin_module: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    failing: Any,
    quiet: bool,
) -> None:
    for index, name in enumerate(LONG_NAMES):
        fake_checks.add(f"ENV-{index + 1}", name=name, body=failing(f"ENV-{index + 1}"))
    monkeypatch.setenv("COLUMNS", "80")

    main(["verify", "cluster_environment", f"{plugin_module}:GoodEnv", *(["-q"] * quiet)])

    lines = capsys.readouterr().out.splitlines()
    assert max(len(line) for line in lines) <= 80
    for name in LONG_NAMES:
        assert any(name in line for line in lines), name


def test_a_wide_console_keeps_the_table(fake_checks: Any, failing: Any) -> None:
    import io

    from rich.console import Console

    from trainspec.conformance import verify

    fake_checks.add("ENV-1", name=LONG_NAMES[0], body=failing("ENV-1"))
    report = verify(("cluster_environment", _good_env_factory()))
    buffer = io.StringIO()

    report.render(Console(file=buffer, width=200, color_system=None))

    text = buffer.getvalue()
    assert "┃ Clause" in text
    assert any(LONG_NAMES[0] in line and "ENV-1" in line for line in text.splitlines())


def _good_env_factory() -> Any:
    from tests.conformance.framework.conftest import GoodEnvironment

    return GoodEnvironment


def test_ctrl_c_in_the_matrix_closes_the_worlds_and_exits_130_with_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from trainspec.conformance import _cli_verify

    closed: list[bool] = []

    class FakeWorld:
        def close(self) -> None:
            closed.append(True)

    def interrupted_entry(entry: Any, layers: Any, timeout: Any, worlds: dict[int, Any]) -> Any:
        worlds[2] = FakeWorld()
        raise KeyboardInterrupt

    monkeypatch.setattr(_cli_verify, "_run_entry", interrupted_entry)

    code = main(["verify", "collective"])

    captured = capsys.readouterr()
    assert code == 130
    assert captured.err.strip().splitlines() == ["trainspec verify: interrupted"]
    assert closed == [True]


def test_a_report_that_cannot_be_written_still_shows_the_table(
    fake_checks: Any,
    plugin_module: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from trainspec.conformance.report import Report

    def full_disk(self: Report, path: object) -> None:
        raise OSError(28, "No space left on device")

    fake_checks.add("ENV-1", name="check_env_one")
    monkeypatch.setattr(Report, "write_json", full_disk)

    code = main(
        ["verify", "cluster_environment", f"{plugin_module}:GoodEnv", "--json", str(tmp_path / "r")]
    )

    captured = capsys.readouterr()
    assert code == 2
    assert "check_env_one" in captured.out
    assert "No space left on device" in _one_line_error(captured.err)
