#!/usr/bin/env python
"""Turn documentation into runnable files, for scripts/wheel_lane.sh.

``readme_blocks.py README.md DIR`` writes each fenced block that follows a
``<!-- wheel-lane: NAME -->`` comment: ``NAME`` itself when it ends in ``.py`` (a file the
reader creates), else ``NAME.sh`` (commands the reader types). Exit 1 when no block is marked.

``readme_blocks.py --ci ci.yml OUT`` writes the ``run`` steps of a GitHub Actions workflow, in
order, as one bash script (each step announced by its name).
"""

from __future__ import annotations

import argparse
import re
import shlex
import sys
from pathlib import Path

MARKED = re.compile(r"<!-- wheel-lane: (?P<name>[\w.-]+) -->\n```[\w-]*\n(?P<body>.*?)\n```", re.S)


def readme_blocks(readme: Path, directory: Path) -> list[Path]:
    written = []
    for match in MARKED.finditer(readme.read_text(encoding="utf-8")):
        name = match.group("name")
        path = directory / (name if name.endswith(".py") else f"{name}.sh")
        path.write_text(match.group("body") + "\n", encoding="utf-8")
        written.append(path)
    return written


def ci_script(workflow: Path, out: Path) -> None:
    import yaml

    document = yaml.safe_load(workflow.read_text(encoding="utf-8"))
    lines = []
    for job in document["jobs"].values():
        for step in job["steps"]:
            if "run" in step:
                lines.append(f"echo {shlex.quote('--- ci.yml step: ' + step.get('name', ''))}")
                lines.append(step["run"].rstrip("\n"))
    out.write_text("\n".join(lines) + "\n", encoding="utf-8")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ci", action="store_true", help="SOURCE is a GitHub Actions workflow")
    parser.add_argument("source", type=Path)
    parser.add_argument("target", type=Path)
    args = parser.parse_args()
    if args.ci:
        ci_script(args.source, args.target)
        return 0
    written = readme_blocks(args.source, args.target)
    if not written:
        print(f"no <!-- wheel-lane: NAME --> block in {args.source}", file=sys.stderr)
        return 1
    print("wrote", ", ".join(path.name for path in written))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
