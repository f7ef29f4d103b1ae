#!/usr/bin/env python
"""Check what trainspec's wheel and sdist hold, for scripts/wheel_lane.sh.

``check_distributions.py WHEEL SDIST``: the wheel holds ``trainspec/py.typed``, the report's
JSON schema, an ``__init__.py`` for every package setup.py maps (every subpackage of
``interfaces/``, ``reference_impls/``, ``conformance_tests/``, ...), the ``trainspec`` console
script and the ``trainspec.*`` and ``pytest11`` entry points; no test, example or cache file;
the sdist holds every source file the wheel was built from plus README.md, pyproject.toml and
setup.py. Each problem is printed; exit 1 when there is one.
"""

from __future__ import annotations

import ast
import sys
import tarfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def mapped_packages() -> dict[str, Path]:
    """Every package setup.py maps, by import name, with its source folder."""
    tree = ast.parse((ROOT / "setup.py").read_text(encoding="utf-8"))
    roots: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "ROOTS" for t in node.targets
        ):
            roots = ast.literal_eval(node.value)
    if not roots:
        raise SystemExit("setup.py has no ROOTS mapping")
    packages: dict[str, Path] = {}
    for name, folder in roots.items():
        base = ROOT / folder
        for init in sorted(base.rglob("__init__.py")):
            relative = init.parent.relative_to(base)
            if any(part.startswith(".") or part == "__pycache__" for part in relative.parts):
                continue
            dotted = ".".join((name, *relative.parts)) if relative.parts else name
            packages[dotted] = init.parent
    return packages


def check(wheel: Path, sdist: Path) -> list[str]:
    problems: list[str] = []
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        info = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
        entry_points = archive.read(info).decode()
    for required in ("trainspec/py.typed", "trainspec/conformance/report.schema.json"):
        if required not in names:
            problems.append(f"the wheel lacks {required}")
    for package, folder in mapped_packages().items():
        path = package.replace(".", "/")
        if f"{path}/__init__.py" not in names:
            problems.append(f"the wheel lacks the package {package} ({folder.relative_to(ROOT)})")
        for source in folder.glob("*.py"):
            if f"{path}/{source.name}" not in names:
                problems.append(f"the wheel lacks {path}/{source.name}")
    for section in (
        "[console_scripts]",
        "[pytest11]",
        "[trainspec.accelerators]",
        "[trainspec.checkpoint_io]",
        "[trainspec.precisions]",
        "[trainspec.strategies]",
        "[trainspec.cluster_environments]",
    ):
        if section not in entry_points:
            problems.append(f"the wheel's entry points lack {section}")
    stray = sorted(n for n in names if n.startswith(("tests/", "examples/")) or "__pycache__" in n)
    problems += [f"the wheel holds {name}" for name in stray[:5]]
    with tarfile.open(sdist) as archive:
        members = {name.split("/", 1)[1] for name in archive.getnames() if "/" in name}
    for required in ("README.md", "pyproject.toml", "setup.py"):
        if required not in members:
            problems.append(f"the sdist lacks {required}")
    for folder in mapped_packages().values():
        for source in folder.glob("*.py"):
            relative = str(source.relative_to(ROOT))
            if relative not in members:
                problems.append(f"the sdist lacks {relative}")
    return problems


def main() -> int:
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    problems = check(Path(sys.argv[1]), Path(sys.argv[2]))
    for problem in problems:
        print(f"check_distributions: {problem}", file=sys.stderr)
    if not problems:
        print(f"{Path(sys.argv[1]).name} and {Path(sys.argv[2]).name}: contents complete")
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
