"""The cluster-environment checks: every clause is covered, the reference environments and
the kit's own static environments pass, os.environ is left as found, and every
fault-seeded environment is rejected by the check that names its clause."""

from __future__ import annotations

import os
import textwrap
from typing import TYPE_CHECKING

import pytest

from tests.conformance.faults.faults_cluster_environment import (
    FAULTS,
    local_factory,
    slurm_factory,
    static_factory,
    torchelastic_factory,
)
from trainspec.conformance.checks import cluster_environment as env_checks
from trainspec.conformance.core import Check, CheckFailure, CheckSkipped, Target, checks_for
from trainspec.conformance.fakes import SingleProcessEnvironment, StaticEnvironment
from trainspec.reference.cluster_environments.local import LocalEnvironment
from trainspec.reference.cluster_environments.slurm import SLURMEnvironment
from trainspec.reference.cluster_environments.torchelastic import TorchElasticEnvironment

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from trainspec.cluster_environment import ClusterEnvironment

CHECKS = checks_for("cluster_environment")


def _configurable(
    name: str,
    cls: Callable[[], ClusterEnvironment],
    factory: Callable[[Mapping[str, str]], ClusterEnvironment],
) -> Target[ClusterEnvironment]:
    return Target(
        "cluster_environment",
        cls,
        name=name,
        capabilities=frozenset({"configurable"}),
        options={"env_factory": factory},
    )


PASSING: dict[str, Target[ClusterEnvironment]] = {
    "LocalEnvironment": _configurable("LocalEnvironment", LocalEnvironment, local_factory),
    "TorchElasticEnvironment": _configurable(
        "TorchElasticEnvironment",
        TorchElasticEnvironment,
        torchelastic_factory(TorchElasticEnvironment),
    ),
    "SLURMEnvironment": _configurable("SLURMEnvironment", SLURMEnvironment, slurm_factory),
    "StaticEnvironment": _configurable("StaticEnvironment", StaticEnvironment, static_factory),
    "SingleProcessEnvironment": Target(
        "cluster_environment", SingleProcessEnvironment, name="SingleProcessEnvironment"
    ),
}


def test_every_environment_clause_has_a_check() -> None:
    assert {c.clause for c in CHECKS} == {f"ENV-{i}" for i in range(1, 7)}
    for c in CHECKS:
        assert c.name.startswith("check_environment_") and c.layer == "behaviour"
        assert c.doc.endswith("."), c.name
        assert c.requires <= set(env_checks.CAPABILITIES)


@pytest.mark.parametrize("name", sorted(PASSING))
@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.name)
def test_reference_environments_pass_and_leave_os_environ_alone(name: str, check: Check) -> None:
    before = dict(os.environ)
    try:
        check.run(PASSING[name])
    except CheckSkipped as skipped:
        # Only a non-configurable target that does not detect this process may skip.
        assert "configurable" not in PASSING[name].capabilities, skipped.reason
    assert dict(os.environ) == before


def test_value_checks_skip_without_detection_or_factory() -> None:
    target: Target[ClusterEnvironment] = Target(
        "cluster_environment", TorchElasticEnvironment, name="TorchElasticEnvironment"
    )
    (ranks,) = [c for c in CHECKS if c.name == "check_environment_ranks_are_within_range"]
    with pytest.raises(CheckSkipped, match="does not detect"):
        ranks.run(target)


def test_the_valid_descriptions_are_consistent_and_the_invalid_ones_are_not() -> None:
    # The kit's own description tables, judged by the kit's own static environment.
    for description in env_checks.VALID_DESCRIPTIONS:
        static_factory(description).validate()
    for why, description in env_checks.INVALID_DESCRIPTIONS:
        with pytest.raises(ValueError):  # ConfigurationError is a ValueError
            static_factory(description).validate()
        assert why


@pytest.mark.parametrize("fault", FAULTS, ids=lambda f: f.__name__)
def test_fault_is_rejected_by_the_check_of_its_clause(fault: type[ClusterEnvironment]) -> None:
    clause: str = fault.clause  # type: ignore[attr-defined]
    target = _configurable(fault.__name__, fault, torchelastic_factory(fault))
    before = dict(os.environ)
    failures: list[CheckFailure] = []
    for c in CHECKS:
        if c.clause != clause:
            continue
        try:
            c.run(target)
        except CheckFailure as caught:
            failures.append(caught)
        except CheckSkipped:
            pass
    assert dict(os.environ) == before
    assert failures, f"no {clause} check rejected {fault.__name__}"
    for caught in failures:
        compile(textwrap.dedent(caught.snippet), "<snippet>", "exec")  # valid Python
        assert caught.clause == clause
        assert str(caught).startswith(f"{fault.__name__} must ")
        assert f"({clause}); got " in str(caught) and caught.snippet
