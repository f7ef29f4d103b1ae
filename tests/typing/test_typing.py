"""The protocols accept complete implementations and reject wrong ones, under both type checkers.

``cases/case_*.py`` hold positive cases (complete implementations assigned to the protocol types,
``assert_type`` on results) and negative cases (a missing member, a wrong signature, a read-only
property assigned to, a wrong return type, a wrong ``Literal`` flag), each negative on one line
with the exact ``# type: ignore[code]`` mypy reports. mypy runs with ``--warn-unused-ignores``
and basedpyright with ``reportUnnecessaryTypeIgnoreComment``, so a positive case that breaks
and a negative case that stops failing both fail here. Each checker runs once, on every case
file, in one subprocess.

Files named ``case_reference_*.py`` check the reference implementations; each is checked once
every ``trainspec.reference`` module it imports exists, so that this test does not depend on
work in progress. :func:`test_reference_case_files_are_checked_when_present` lists the ones
left out.
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
CASES = HERE / "cases"
PYRIGHT_CONFIG = HERE / "pyrightconfig.json"
REFERENCE_SOURCES = ROOT / "reference_impls"
TIMEOUT_S = 600

IGNORE = re.compile(r"\s+# type: ignore\[[a-z, -]+\]$")
MYPY_ERROR = re.compile(r"^(?P<path>[^:\n]+\.py):(?P<line>\d+): error: (?P<message>.*)$", re.M)

pytestmark = pytest.mark.timeout(2 * TIMEOUT_S)


def _missing_reference_modules(case: Path) -> list[str]:
    """The ``trainspec.reference`` modules ``case`` imports that have no source file yet."""
    missing: list[str] = []
    for node in ast.walk(ast.parse(case.read_text(encoding="utf-8"))):
        if not isinstance(node, ast.ImportFrom) or node.module is None:
            continue
        if node.module != "trainspec.reference" and not node.module.startswith(
            "trainspec.reference."
        ):
            continue
        relative = node.module.removeprefix("trainspec.reference").lstrip(".").replace(".", "/")
        base = REFERENCE_SOURCES / relative if relative else REFERENCE_SOURCES
        if not (base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()):
            missing.append(node.module)
    return missing


def _case_files() -> tuple[list[Path], dict[str, list[str]]]:
    """The case files to check, and the reference case files left out (with what is missing)."""
    checked: list[Path] = []
    left_out: dict[str, list[str]] = {}
    for case in sorted(CASES.glob("case_*.py")):
        missing = _missing_reference_modules(case)
        if missing:
            left_out[case.name] = missing
        else:
            checked.append(case)
    return checked, left_out


def _run(command: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        command, cwd=ROOT, capture_output=True, text=True, timeout=TIMEOUT_S, check=False
    )


def _mypy(paths: list[Path]) -> subprocess.CompletedProcess[str]:
    # The project's [tool.mypy] config (strict) applies; the flags restate what this test needs.
    return _run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--config-file",
            str(ROOT / "pyproject.toml"),
            "--strict",
            "--warn-unused-ignores",
            "--enable-error-code",
            "ignore-without-code",
            "--no-color-output",
            *map(str, paths),
        ]
    )


def _basedpyright(paths: list[Path]) -> subprocess.CompletedProcess[str]:
    executable = Path(sys.executable).parent / "basedpyright"
    assert executable.exists(), (
        f"basedpyright is not installed next to {sys.executable}; install the dev extra "
        "(pip install -e '.[dev]')"
    )
    return _run(
        [
            str(executable),
            "--project",
            str(PYRIGHT_CONFIG),
            "--pythonpath",
            sys.executable,
            "--outputjson",
            *map(str, paths),
        ]
    )


def _pyright_errors(result: subprocess.CompletedProcess[str]) -> list[tuple[str, int, str]]:
    """(file name, 1-based line, rule) of every error in basedpyright's JSON output."""
    try:
        report = json.loads(result.stdout)
    except json.JSONDecodeError:
        pytest.fail(f"basedpyright did not produce a JSON report:\n{result.stdout}{result.stderr}")
    return [
        (Path(d["file"]).name, d["range"]["start"]["line"] + 1, d.get("rule", ""))
        for d in report["generalDiagnostics"]
        if d["severity"] == "error"
    ]


def test_typing_cases_pass_mypy_strict() -> None:
    cases, _ = _case_files()
    result = _mypy(cases)
    assert result.returncode == 0, (
        "mypy --strict --warn-unused-ignores must accept every typing case (an 'unused ignore' "
        "means a negative case no longer fails):\n" + result.stdout + result.stderr
    )


def test_typing_cases_pass_basedpyright() -> None:
    cases, _ = _case_files()
    result = _basedpyright(cases)
    errors = _pyright_errors(result)
    assert result.returncode == 0 and not errors, (
        "basedpyright must accept every typing case (reportUnnecessaryTypeIgnoreComment means "
        "a negative case no longer fails):\n" + result.stdout + result.stderr
    )


def test_the_harness_fails_when_a_negative_case_is_unsuppressed_or_a_suppression_is_unused(
    tmp_path: Path,
) -> None:
    """Both checkers must report an error on exactly the lines whose ignore was removed, and an
    unused ignore where a line type-checks; otherwise the main tests could never fail."""
    source = CASES / "case_accelerator.py"
    lines = source.read_text(encoding="utf-8").splitlines()
    suppressed = {number for number, line in enumerate(lines, 1) if IGNORE.search(line)}
    assert len(suppressed) >= 5, f"{source.name} must keep its negative cases"
    stripped = tmp_path / "case_accelerator.py"
    stripped.write_text("\n".join(IGNORE.sub("", line) for line in lines) + "\n", encoding="utf-8")

    positive = (CASES / "case_launcher.py").read_text(encoding="utf-8")
    unused = tmp_path / "case_unused_ignore.py"
    unused.write_text(positive + "well_typed: int = 1  # type: ignore[assignment]\n", "utf-8")
    unused_line = positive.count("\n") + 1

    mypy = _mypy([stripped, unused])
    assert mypy.returncode == 1, mypy.stdout + mypy.stderr
    mypy_errors = [
        (Path(m["path"]).name, int(m["line"]), m["message"])
        for m in MYPY_ERROR.finditer(mypy.stdout)
    ]
    assert {line for name, line, _ in mypy_errors if name == stripped.name} == suppressed
    unused_errors = [(line, message) for name, line, message in mypy_errors if name == unused.name]
    assert len(unused_errors) == 1 and unused_errors[0][0] == unused_line, mypy.stdout
    assert "unused" in unused_errors[0][1].lower(), mypy.stdout

    pyright = _basedpyright([stripped, unused])
    assert pyright.returncode == 1, pyright.stdout + pyright.stderr
    pyright_errors = _pyright_errors(pyright)
    assert {line for name, line, _ in pyright_errors if name == stripped.name} == suppressed
    assert [(line, rule) for name, line, rule in pyright_errors if name == unused.name] == [
        (unused_line, "reportUnnecessaryTypeIgnoreComment")
    ]


def test_reference_case_files_are_checked_when_present() -> None:
    """Every case file is either checked or waits only for reference modules not written yet."""
    checked, left_out = _case_files()
    assert len(checked) >= 7, "the protocol case files must always be checked"
    for name in left_out:
        assert name.startswith("case_reference_"), (
            f"{name} imports trainspec.reference modules that do not exist: {left_out[name]}; "
            "only case_reference_*.py files may wait for reference implementations"
        )
    # Visible in -rA / on failure: which reference case files are waiting, for what.
    print({name: modules for name, modules in left_out.items()})
