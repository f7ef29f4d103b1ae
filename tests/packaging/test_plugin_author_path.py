"""The plugin author's path, checked without building anything: what the README tells them to
write conforms, the distribution's dependencies stay minimal and justified, and the checks the
wheel lane (``scripts/wheel_lane.sh``) relies on can fail.

The lane itself (build, fresh environment, README verbatim, example ``ci.yml``) runs in CI from
``.ci/run``; it takes minutes, so it is not a pytest test.
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import tomllib

from trainspec.conformance import verify

if TYPE_CHECKING:
    from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = ROOT / "scripts"


def _script(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"trainspec_tests_{name}", SCRIPTS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def readme_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    written = _script("readme_blocks").readme_blocks(ROOT / "README.md", tmp_path)
    assert {path.name for path in written} >= {
        "install.sh",
        "my_scheduler.py",
        "check.sh",
        "test_my_scheduler.py",
        "test.sh",
    }
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "my_scheduler", raising=False)
    return tmp_path


def test_readme_quick_start_class_conforms(readme_files: Path) -> None:
    from my_scheduler import MySchedulerEnvironment  # type: ignore[import-not-found]

    report = verify(("cluster_environment", MySchedulerEnvironment))
    assert report.ok, report


def test_readme_commands_name_the_class_the_readme_writes(readme_files: Path) -> None:
    check = (readme_files / "check.sh").read_text(encoding="utf-8")
    assert "trainspec verify cluster_environment my_scheduler:MySchedulerEnvironment" in check
    assert "trainspec typecheck my_scheduler:MySchedulerEnvironment" in check
    install = (readme_files / "install.sh").read_text(encoding="utf-8")
    version = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"][
        "version"
    ]
    # The wheel the README installs is the one `python -m build` writes for this version.
    assert f"dist/trainspec-{version}-py3-none-any.whl[typecheck]" in install


def test_readme_keeps_the_contributors_two_commands() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "bash scripts/setup-env.sh && .venv/bin/trainspec verify" in readme
    assert "bash scripts/setup-env.sh && .venv/bin/python -m pytest" in readme
    assert readme.index("Quick start for plugin authors") < readme.index(
        "Quick start for contributors"
    )


def test_every_runtime_dependency_is_justified_by_a_comment() -> None:
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    block = re.search(r"^dependencies = \[\n(?P<body>.*?)^\]", text, re.S | re.M)
    assert block is not None
    lines = block.group("body").splitlines()
    unjustified = [
        line.strip()
        for index, line in enumerate(lines)
        if line.strip().startswith('"') and not lines[index - 1].strip().startswith("#")
    ]
    assert unjustified == []
    project = tomllib.loads(text)["project"]
    names = {re.split(r"[<>=\[ ]", d)[0] for d in project["dependencies"]}
    # Nothing else at run time (numpy: torch.distributed needs it and torch does not bring it).
    assert names == {"torch", "typing-extensions", "hypothesis", "rich", "numpy"}
    assert any(d.startswith("mypy") for d in project["optional-dependencies"]["typecheck"])


def test_example_ci_installs_trainspec_before_the_plugin(tmp_path: Path) -> None:
    pytest.importorskip("yaml")
    out = tmp_path / "ci.sh"
    _script("readme_blocks").ci_script(ROOT / "examples" / "trainspec_example" / "ci.yml", out)
    script = out.read_text(encoding="utf-8")
    assert 'pip install "$TRAINSPEC"' in script
    assert script.index('pip install "$TRAINSPEC"') < script.index('pip install -e ".[test]"')
    assert "trainspec verify" in script and "python -m pytest" in script


# -- the distribution checker can fail -------------------------------------------------------------


def _fake_distributions(tmp_path: Path, *, drop: str = "") -> tuple[Path, Path]:
    """A wheel and an sdist holding what a correct build holds, less ``drop``."""
    checker = _script("check_distributions")
    wheel_names = ["trainspec/py.typed", "trainspec/conformance/report.schema.json"]
    sdist_names = ["README.md", "pyproject.toml", "setup.py"]
    for package, folder in checker.mapped_packages().items():
        path = package.replace(".", "/")
        wheel_names += [f"{path}/{source.name}" for source in folder.glob("*.py")]
        sdist_names += [str(source.relative_to(ROOT)) for source in folder.glob("*.py")]
    entry_points = "\n".join(
        f"[{section}]\nx = y:z\n"
        for section in (
            "console_scripts",
            "pytest11",
            "trainspec.accelerators",
            "trainspec.checkpoint_io",
            "trainspec.precisions",
            "trainspec.strategies",
            "trainspec.cluster_environments",
        )
    )
    wheel = tmp_path / "trainspec-0.1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for name in wheel_names:
            if name != drop:
                archive.writestr(name, "")
        archive.writestr("trainspec-0.1.0.dist-info/entry_points.txt", entry_points)
    sdist = tmp_path / "trainspec-0.1.0.tar.gz"
    source = tmp_path / "source"
    for name in sdist_names:
        if name != drop:
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            (source / name).write_text("")
    with tarfile.open(sdist, "w:gz") as archive:
        archive.add(source, arcname="trainspec-0.1.0")
    return wheel, sdist


def test_distribution_check_accepts_complete_distributions(tmp_path: Path) -> None:
    checker = _script("check_distributions")
    assert checker.check(*_fake_distributions(tmp_path)) == []


@pytest.mark.parametrize(
    "dropped",
    [
        "trainspec/py.typed",
        "trainspec/conformance/report.schema.json",
        "trainspec/reference/strategies/__init__.py",
        "trainspec/conformance/checks/__init__.py",
        "README.md",
        "reference_impls/demo.py",
    ],
)
def test_distribution_check_rejects_a_missing_file(tmp_path: Path, dropped: str) -> None:
    checker = _script("check_distributions")
    problems = checker.check(*_fake_distributions(tmp_path, drop=dropped))
    assert any(dropped in problem for problem in problems), problems


def test_wheel_lane_is_called_by_ci() -> None:
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert "scripts/wheel_lane.sh" in ci
    completed = subprocess.run(
        ["bash", "-n", str(SCRIPTS / "wheel_lane.sh")], capture_output=True, text=True, check=False
    )
    assert completed.returncode == 0, completed.stderr


# -- the matrix without optional extras ---------------------------------------------------------


def test_matrix_skips_a_builtin_row_whose_extra_is_not_installed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # `pip install trainspec` then `trainspec verify`: SafetensorsCheckpointIO's module imports,
    # but the class needs the `safetensors` extra; its row must be skipped, not an error.
    import importlib.util

    from trainspec import ConfigurationError
    from trainspec.conformance import builtin_targets

    row = next(
        t for t in builtin_targets.builtin_targets("checkpoint_io") if t.name == "safetensors"
    )
    real_find_spec = importlib.util.find_spec

    def without_safetensors(name: str, *args: object) -> object:
        return None if name == "safetensors" else real_find_spec(name, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(importlib.util, "find_spec", without_safetensors)
    with pytest.raises(ConfigurationError, match=r"trainspec\[safetensors\]"):
        row.load()
