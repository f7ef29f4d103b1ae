"""Report data, JSON (validated by the shipped schema), JUnit XML and the terminal table."""

from __future__ import annotations

import io
import json
import xml.etree.ElementTree as ET
from typing import TYPE_CHECKING, Any

import jsonschema
import pytest
from rich.console import Console

import trainspec
from trainspec.conformance.report import (
    STATUSES,
    CheckResult,
    Environment,
    Report,
    Summary,
    TargetReport,
    json_schema,
)

if TYPE_CHECKING:
    from pathlib import Path

ENV = Environment(
    trainspec_version="0.1.0", spec_version="1.0", python="3.11.9", torch=None, platform="Linux"
)


def _result(status: Any, check: str, clause: str = "CKPT-1", layer: str = "behaviour") -> Any:
    message = "" if status == "passed" else f"{check} said {status}\nsecond line"
    return CheckResult(
        check, clause, layer, status, message, "Traceback ..." if status == "failed" else "", 0.25
    )


def _report() -> Report:
    results = (
        _result("passed", "structure:CheckpointIO", "CKPT", "structure"),
        *(_result(status, f"check_io_{status}") for status in STATUSES),
    )
    io_target = TargetReport(
        kind="checkpoint_io",
        name="my_pkg.io:MyIO",
        results=results,
        version="1.2.3",
        capabilities=("async",),
        expected_failures={"CKPT-3": "atomic rename missing"},
        duration_s=2.0,
    )
    skipped = TargetReport(kind="accelerator", name="xla", skipped="torch_xla is not installed")
    broken = TargetReport(
        kind="strategy",
        name="ddp",
        results=(_result("passed", "structure:Strategy", "STRAT", "structure"),),
        problems=("no checks ran for ddp: 0 selected",),
    )
    return Report(
        targets=(io_target, skipped, broken), environment=ENV, created="2024-01-01T00:00:00+00:00"
    )


def test_summary_and_verdicts() -> None:
    report = _report()
    io_target, skipped, broken = report.targets

    assert io_target.summary == Summary(
        passed=2, failed=1, skipped=1, xfailed=1, xpassed=1, blocked=1, error=1
    )
    assert io_target.summary.total == 8
    assert io_target.executed == 5  # passed, failed, xfailed, xpassed, error outside structure
    assert not io_target.ok
    assert skipped.ok and skipped.verdict == "SKIPPED"
    assert not broken.ok  # a run-level problem fails the target
    assert not report.ok
    assert str(Summary(passed=3, blocked=1)) == "3 passed, 1 blocked"


@pytest.mark.parametrize("status", ["failed", "xpassed", "error"])
def test_each_failing_status_fails_the_target(status: Any) -> None:
    ok = TargetReport("precision", "p", (_result("passed", "check_a"),))
    bad = TargetReport("precision", "p", (_result("passed", "check_a"), _result(status, "check_b")))

    assert ok.ok
    assert not bad.ok


@pytest.mark.parametrize("status", ["skipped", "xfailed", "blocked"])
def test_non_failing_statuses_keep_the_target_ok(status: Any) -> None:
    target = TargetReport(
        "precision", "p", (_result("passed", "check_a"), _result(status, "check_b"))
    )

    assert target.ok


def test_a_report_with_nothing_run_is_not_ok() -> None:
    assert not Report(targets=(), environment=ENV).ok
    only_skipped = TargetReport(kind="accelerator", name="xla", skipped="not here")
    assert not Report(targets=(only_skipped,), environment=ENV).ok


def test_json_validates_against_the_shipped_schema_and_round_trips(tmp_path: Path) -> None:
    report = _report()
    schema = json_schema()
    path = tmp_path / "out" / "report.json"

    report.write_json(path)
    data = json.loads(path.read_text(encoding="utf-8"))

    jsonschema.Draft202012Validator.check_schema(schema)
    jsonschema.Draft202012Validator(schema).validate(data)
    assert data["trainspec_version"] == "0.1.0"
    assert data["spec_version"] == "1.0"
    assert data["targets"][0]["version"] == "1.2.3"
    assert data["targets"][0]["summary"]["xpassed"] == 1
    assert data["ok"] is False
    assert Report.from_dict(data) == report


def test_the_schema_rejects_what_the_report_never_writes() -> None:
    data = _report().to_dict()
    targets: Any = data["targets"]
    targets[0]["results"][0]["status"] = "kinda-passed"

    with pytest.raises(jsonschema.ValidationError):
        jsonschema.Draft202012Validator(json_schema()).validate(data)


def test_current_environment_names_the_versions_without_importing_torch() -> None:
    env = Environment.current()

    assert env.trainspec_version == trainspec.__version__
    assert env.spec_version == trainspec.SPEC_VERSION
    assert env.torch is not None and env.torch[0].isdigit()


def test_junit_xml_parses_with_one_suite_per_target(tmp_path: Path) -> None:
    path = tmp_path / "junit.xml"
    _report().write_junit(path)

    root = ET.parse(path).getroot()
    suites = root.findall("testsuite")

    assert root.tag == "testsuites"
    assert [s.get("name") for s in suites] == [
        "checkpoint_io: my_pkg.io:MyIO",
        "accelerator: xla",
        "strategy: ddp",
    ]
    io_suite = suites[0]
    cases = io_suite.findall("testcase")
    assert len(cases) == 8
    assert (io_suite.get("tests"), io_suite.get("failures"), io_suite.get("errors")) == (
        "8",
        "2",
        "1",
    )
    assert io_suite.get("skipped") == "3"  # skipped, xfailed, blocked
    by_name = {c.get("name"): c for c in cases}
    failure = by_name["CKPT-1 check_io_failed"].find("failure")
    assert failure is not None
    assert failure.get("message") == "check_io_failed said failed"
    assert "Traceback ..." in (failure.text or "")
    assert by_name["CKPT-1 check_io_xpassed"].find("failure") is not None
    assert by_name["CKPT-1 check_io_error"].find("error") is not None
    xfail = by_name["CKPT-1 check_io_xfailed"].find("skipped")
    assert xfail is not None and xfail.get("type") == "xfail"
    props = {p.get("name"): p.get("value") for p in io_suite.iter("property")}
    assert props["spec_version"] == "1.0"
    assert props["target_version"] == "1.2.3"
    assert suites[1].find("testcase/skipped") is not None
    assert suites[2].find("testcase[@name='run']/failure") is not None
    assert root.get("tests") == str(8 + 1 + 2)


def _rendered(report: Report, *, quiet: bool = False) -> str:
    buffer = io.StringIO()
    report.render(Console(file=buffer, width=200, color_system=None), quiet=quiet)
    return buffer.getvalue()


def test_terminal_table_lists_clause_check_status_and_first_message_line() -> None:
    text = _rendered(_report())

    assert "check_io_failed" in text
    assert "check_io_failed said failed" in text
    assert "second line" not in text
    assert "xpassed" in text
    assert "accelerator: xla: skipped: torch_xla is not installed" in text
    assert "problem: no checks ran for ddp" in text
    assert text.rstrip().splitlines()[-1].startswith("3 targets: 3 passed, 1 failed")
    assert text.rstrip().endswith("FAILED")


def test_quiet_table_lists_only_what_fails_the_run() -> None:
    text = _rendered(_report(), quiet=True)

    assert "check_io_failed" in text
    assert "check_io_error" in text
    assert "check_io_skipped" not in text
    assert "check_io_passed" not in text


def test_combine_keeps_every_target_in_order() -> None:
    first = Report(targets=_report().targets[:1], environment=ENV)
    second = Report(targets=_report().targets[1:], environment=ENV)

    combined = Report.combine([first, second])

    assert combined.targets == _report().targets
    assert combined.environment == ENV
    assert Report.combine([]).targets == ()


def test_repro_snippet_is_the_indented_script_after_the_marker() -> None:
    from trainspec.conformance.report import repro_snippet

    message = (
        "X must y (CKPT-1); got z.\n\nTo reproduce:\n    import torch\n\n    if True:\n"
        "        print('[/bold]')\n(cleanup after the check: teardown raised)"
    )

    assert repro_snippet(message) == "import torch\n\nif True:\n    print('[/bold]')"
    assert repro_snippet("no snippet here") == ""


@pytest.mark.parametrize("width", [80, 60])
def test_narrow_consoles_list_results_without_breaking_check_names(width: int) -> None:
    name = "check_strategy_save_checkpoint_writes_a_complete_checkpoint_before_returning"
    result = CheckResult(name, "STRAT-9", "behaviour", "failed", "[/red] gloo [rank0] " * 8)
    report = Report(
        targets=(TargetReport(kind="strategy", name="[bold]x", results=(result,)),),
        environment=ENV,
    )
    buffer = io.StringIO()

    report.render(Console(file=buffer, width=width, color_system=None), show_repro=True)

    lines = buffer.getvalue().splitlines()
    assert f"  {name}" in lines
    assert "strategy: [bold]x" in lines
    assert "[/red] gloo [rank0]" in buffer.getvalue()
