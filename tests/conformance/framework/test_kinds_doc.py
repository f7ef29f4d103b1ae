"""docs/plugin-authors/running-the-kit.md lists every kind's capabilities and options from the
table of kinds, and names only checks that exist."""

from __future__ import annotations

import importlib
import importlib.util
import re
import subprocess
import sys
from pathlib import Path

from trainspec.conformance.core import all_checks, checks_for
from trainspec.conformance.kinds import KIND_TABLE

ROOT = Path(__file__).resolve().parents[3]
PAGE = ROOT / "docs" / "plugin-authors" / "running-the-kit.md"


def _generator() -> object:
    spec = importlib.util.spec_from_file_location(
        "gen_kinds_doc", ROOT / "scripts" / "gen_kinds_doc.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_generated_section_is_up_to_date() -> None:
    text = PAGE.read_text(encoding="utf-8")

    regenerated = _generator().regenerated(text)  # type: ignore[attr-defined]

    assert regenerated == text, "run: python scripts/gen_kinds_doc.py"


def test_every_option_and_capability_of_every_kind_is_listed() -> None:
    text = PAGE.read_text(encoding="utf-8")

    for kind, spec in KIND_TABLE.items():
        assert f"### `{kind}`" in text
        for name in (*spec.vocabulary, *(option.name for option in spec.options)):
            assert f"| `{name}` |" in text, (kind, name)


def test_the_page_names_only_checks_that_exist() -> None:
    text = PAGE.read_text(encoding="utf-8")
    existing = {check.name for check in all_checks(distributed=True)}

    named = set(re.findall(r"\bcheck_[a-z0-9_]+", text))

    assert named <= existing, sorted(named - existing)


def _generated_in_a_fresh_process(*, import_first: str) -> str:
    code = (
        "import importlib, sys\n"
        f"if {import_first!r}: importlib.import_module({import_first!r})\n"
        "from trainspec.conformance.kinds import markdown\n"
        "sys.stdout.write(markdown())\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False, cwd=ROOT
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_the_generated_section_does_not_depend_on_what_was_imported_before() -> None:
    # The distributed checks register into the same registry as the behaviour checks when
    # imported; the generated text must be the same whether or not they were.
    plain = _generated_in_a_fresh_process(import_first="")
    after_distributed = _generated_in_a_fresh_process(
        import_first="trainspec.conformance.distributed.checks"
    )

    assert after_distributed == plain
    assert "check_dckpt_parts_load_back_complete_on_every_rank" in plain  # named in both


def test_checks_for_returns_the_checks_of_the_listed_modules_only() -> None:
    importlib.import_module("trainspec.conformance.distributed.checks")  # registers them

    behaviour = checks_for("strategy")
    everything = checks_for("strategy", distributed=True)

    listed = KIND_TABLE["strategy"].check_modules
    assert behaviour and all(c.func.__module__ in listed for c in behaviour)
    assert set(behaviour) < set(everything)
    assert {c.func.__module__ for c in everything} - set(listed) == set(
        KIND_TABLE["strategy"].distributed_check_modules
    )
