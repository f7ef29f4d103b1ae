"""The public surface of trainspec.conformance and the consistency of the check registry."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

import trainspec.conformance as conformance
from trainspec.conformance import builtin_targets, capabilities, core, suites
from trainspec.conformance.capabilities import validate_capabilities, vocabulary


def test_all_is_sorted_and_every_name_resolves() -> None:
    exported = conformance.__all__

    assert exported == sorted(exported, key=lambda n: (not n.isupper(), n))
    for name in exported:
        assert getattr(conformance, name) is not None


def test_suites_are_reachable_lazily_and_are_never_collected_on_their_own() -> None:
    assert conformance.CheckpointIOSuite is suites.CheckpointIOSuite
    assert conformance.AsyncCheckpointIOSuite.implied_capabilities == frozenset({"async"})
    for name in suites.__all__:
        assert not name.startswith("Test")
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        conformance.Nope  # noqa: B018


def test_importing_the_kit_imports_neither_torch_nor_pytest() -> None:
    code = textwrap.dedent(
        """
        import sys
        import trainspec.conformance
        import trainspec.conformance.cli
        import trainspec.conformance.pytest_plugin  # imports pytest by design
        heavy = [m for m in ("torch", "rich") if m in sys.modules]
        print(",".join(heavy))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )

    assert done.stdout.strip() == ""


def _loaded_kinds() -> list[core.Kind]:
    kinds: list[core.Kind] = []
    for kind in core.KINDS:
        try:
            core.checks_for(kind)
        except ModuleNotFoundError as error:
            if error.name != capabilities.checks_module_name(kind):
                raise
            continue
        kinds.append(kind)
    return kinds


def test_every_registered_check_requires_only_capabilities_its_kind_declares() -> None:
    kinds = _loaded_kinds()
    if not kinds:
        pytest.skip("no checks module is installed yet")
    for kind in kinds:
        known = vocabulary(kind)
        for check in core.checks_for(kind):
            unknown = check.requires - set(known)
            assert not unknown, f"{check.name} requires {unknown}, not in {kind}'s vocabulary"
            assert check.name.startswith("check_"), check.name
            assert check.clause.split("-")[0].isupper(), check.clause


def test_builtin_targets_declare_known_capabilities() -> None:
    kinds = set(_loaded_kinds())
    for entry in builtin_targets.BUILTIN_TARGETS:
        if entry.kind in kinds:
            validate_capabilities(entry.kind, entry.capabilities)
