"""Regressions of issue 15 with third-party-shaped cluster environments and the real checks:
every instance lives and dies inside the environment sandbox (so ENV-6 sees a teardown that
deletes a variable it never set), and ``env_factory`` may skip one description without the
whole check being skipped."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from trainspec import ConfigurationError
from trainspec.conformance import CheckSkipped, Target, verify

if TYPE_CHECKING:
    from collections.abc import Mapping

    import pytest

    from trainspec.conformance import Report

VICTIM = "TRAINSPEC_TEST_VICTIM"


class DescribedEnvironment:
    """A plugin's environment, structurally conforming (no trainspec base class), built from
    a run description, changing nothing in the process."""

    def __init__(self, description: Mapping[str, str] | None = None) -> None:
        values = dict(description or {})

        def number(name: str, default: str) -> int:
            try:
                return int(values.get(name, default))
            except ValueError:
                raise ConfigurationError(f"{name} must be an integer") from None

        self._world_size = number("world_size", "1")
        self._global_rank = number("global_rank", "0")
        self._local_rank = number("local_rank", "0")
        self._node_rank = number("node_rank", "0")
        self._main_port = number("main_port", "29500")
        self._main_address = values.get("main_address", "127.0.0.1")

    def detect(self) -> bool:
        return True

    @property
    def creates_processes_externally(self) -> bool:
        return True

    @property
    def main_address(self) -> str:
        return self._main_address

    @property
    def main_port(self) -> int:
        return self._main_port

    @property
    def world_size(self) -> int:
        return self._world_size

    @property
    def global_rank(self) -> int:
        return self._global_rank

    @property
    def local_rank(self) -> int:
        return self._local_rank

    @property
    def node_rank(self) -> int:
        return self._node_rank

    def validate(self) -> None:
        ok = (
            self._world_size >= 1
            and 0 <= self._local_rank <= self._global_rank < self._world_size
            and self._node_rank >= 0
            and 1 <= self._main_port <= 65535
            and bool(self._main_address)
        )
        if not ok:
            raise ConfigurationError("inconsistent description; ranks must be in range")

    def teardown(self) -> None:
        return None


class DeletesWhatItNeverSet(DescribedEnvironment):
    """Fault: teardown deletes a variable of the process it never set (ENV-6)."""

    def teardown(self) -> None:
        os.environ.pop(VICTIM, None)


def low_ports_factory(description: Mapping[str, str]) -> DescribedEnvironment:
    """An env_factory whose environment cannot express a port above 65000 (one valid and
    one invalid description of the kit's)."""
    if description["main_port"] in ("65535", "65536"):
        raise CheckSkipped("this scheduler only hands out ports up to 65000")
    return DescribedEnvironment(description)


def skip_everything_factory(description: Mapping[str, str]) -> DescribedEnvironment:
    raise CheckSkipped("cannot express any description")


def _statuses(report: Report) -> dict[str, str]:
    return {r.check: r.status for r in report.results}


def test_a_teardown_that_deletes_a_variable_it_never_set_fails_env_6(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(VICTIM, "kept")

    report = verify(Target("cluster_environment", DeletesWhatItNeverSet), select=["ENV-6"])

    (env_6,) = [r for r in report.results if r.clause == "ENV-6"]
    assert env_6.status == "failed", env_6.message
    assert VICTIM in env_6.message
    assert os.environ.get(VICTIM) == "kept"  # the kit's process is left as it was


def test_the_same_environment_without_the_fault_passes_env_6(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(VICTIM, "kept")

    report = verify(Target("cluster_environment", DescribedEnvironment), select=["ENV-6"])

    assert report.ok, report.results


def test_no_instance_outlives_the_sandbox_even_in_the_structure_layer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(VICTIM, "kept")

    verify(Target("cluster_environment", DeletesWhatItNeverSet), select=["ENV-2"])

    assert os.environ.get(VICTIM) == "kept"


def test_an_env_factory_skipping_one_description_skips_only_that_description() -> None:
    target = Target(
        "cluster_environment",
        DescribedEnvironment,
        capabilities=frozenset({"configurable"}),
        options={"env_factory": low_ports_factory},
    )

    report = verify(target)

    statuses = _statuses(report)
    assert report.ok, report.results
    assert statuses["check_environment_ranks_are_within_range"] == "passed"
    assert statuses["check_environment_validate_rejects_inconsistent_descriptions"] == "passed"


def test_a_fault_in_a_description_the_factory_builds_is_still_caught() -> None:
    def off_by_one(description: Mapping[str, str]) -> DescribedEnvironment:
        environment = low_ports_factory(description)
        environment._global_rank += 1  # reports the next rank
        return environment

    target = Target(
        "cluster_environment",
        DescribedEnvironment,
        capabilities=frozenset({"configurable"}),
        options={"env_factory": off_by_one},
    )

    report = verify(target, select=["ENV-4"])

    assert _statuses(report)["check_environment_ranks_are_within_range"] == "failed"


def test_an_env_factory_skipping_every_description_skips_with_its_reason() -> None:
    target = Target(
        "cluster_environment",
        DescribedEnvironment,
        capabilities=frozenset({"configurable"}),
        options={"env_factory": skip_everything_factory},
    )

    report = verify(target, select=["check_environment_validate_rejects_inconsistent_descriptions"])

    (result,) = [r for r in report.results if r.layer != "structure"]
    assert result.status == "skipped"
    assert "cannot express any description" in result.message
