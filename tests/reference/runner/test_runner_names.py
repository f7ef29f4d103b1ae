"""The Runner's names: each public member is a Strategy (or capability) name, or is mapped.

The mapping table lives in the Runner's class docstring and in docs/api-reference.md; these
tests keep the two equal and complete, and check that every name a row maps to exists.
"""

from __future__ import annotations

import inspect
import re
from pathlib import Path

from trainspec import BackwardSyncControl, ShardedModuleContext, StepBoundary, Strategy
from trainspec.reference.runner import Runner

ROOT = Path(__file__).resolve().parents[3]
_ROW = re.compile(r"^\s*\| `(?P<member>\w+)` \| (?P<calls>.+?) \|\s*$")
_NAME = re.compile(r"`([\w.]+)`")


def _protocol_members(*protocols: type) -> set[str]:
    return {name for protocol in protocols for name in vars(protocol) if not name.startswith("_")}


STRATEGY_NAMES = _protocol_members(Strategy)
CAPABILITY_NAMES = _protocol_members(BackwardSyncControl, ShardedModuleContext, StepBoundary)


def _table(text: str) -> dict[str, str]:
    rows = {}
    for line in text.splitlines():
        found = _ROW.match(line)
        if found:
            assert found["member"] not in rows, f"{found['member']} is mapped twice"
            rows[found["member"]] = found["calls"]
    return rows


def _runner_members() -> set[str]:
    return {name for name, _ in inspect.getmembers(Runner) if not name.startswith("_")}


def test_the_protocol_member_lists_are_not_empty() -> None:
    assert {"setup_module", "batch_to_device", "all_reduce"} <= STRATEGY_NAMES
    assert {"no_backward_sync", "mark_step"} <= CAPABILITY_NAMES


def test_every_runner_member_is_a_protocol_name_or_mapped_in_the_docstring() -> None:
    mapped = _table(inspect.getdoc(Runner) or "")
    unexplained = sorted(_runner_members() - STRATEGY_NAMES - CAPABILITY_NAMES - set(mapped))
    assert not unexplained, (
        f"Runner members {unexplained} are neither Strategy/capability names nor rows of the "
        "mapping table in Runner's docstring; rename them or add a row"
    )


def test_the_mapping_lists_only_runner_members_that_differ_from_the_protocol() -> None:
    mapped = _table(inspect.getdoc(Runner) or "")
    assert set(mapped) <= _runner_members(), sorted(set(mapped) - _runner_members())
    same = sorted(set(mapped) & (STRATEGY_NAMES | CAPABILITY_NAMES))
    assert not same, f"{same} carry the protocol's name and need no row"


def test_every_mapped_name_is_a_strategy_member() -> None:
    for member, calls in _table(inspect.getdoc(Runner) or "").items():
        names = _NAME.findall(calls)
        if member in ("strategy", "from_config"):
            continue  # the strategy itself; a constructor from names
        assert names, f"row {member} names no Strategy member"
        unknown = [name for name in names if name.partition(".")[0] not in STRATEGY_NAMES]
        assert not unknown, f"row {member} maps to {unknown}, which Strategy lacks"


def test_the_api_reference_repeats_the_docstring_table() -> None:
    page = (ROOT / "docs" / "api-reference.md").read_text(encoding="utf-8")
    assert _table(page) == _table(inspect.getdoc(Runner) or "")
