"""Fault-seeded cluster environments: each subclasses the reference
``TorchElasticEnvironment`` and breaks exactly one rule; ``clause`` names the clause whose
check must reject it.

Also the ``env_factory`` adapters that describe a run to each reference environment (and to
the kit's own :class:`~trainspec.conformance.fakes.StaticEnvironment`), so the tests can run
the ``configurable`` checks on all of them.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import ClassVar

from trainspec.cluster_environment import ClusterEnvironment
from trainspec.conformance.fakes import StaticEnvironment
from trainspec.errors import ConfigurationError, LifecycleError
from trainspec.reference.cluster_environments._variables import read_int
from trainspec.reference.cluster_environments.local import LocalEnvironment
from trainspec.reference.cluster_environments.slurm import SLURMEnvironment
from trainspec.reference.cluster_environments.torchelastic import TorchElasticEnvironment

EnvFactory = Callable[[Mapping[str, str]], ClusterEnvironment]


# --------------------------------------------------------------------------- env_factory adapters


def torchelastic_variables(description: Mapping[str, str]) -> dict[str, str]:
    """What torchrun would set for the described rank."""
    return {
        "TORCHELASTIC_RUN_ID": "conformance",
        "RANK": description["global_rank"],
        "WORLD_SIZE": description["world_size"],
        "LOCAL_RANK": description["local_rank"],
        "GROUP_RANK": description["node_rank"],
        "MASTER_ADDR": description["main_address"],
        "MASTER_PORT": description["main_port"],
    }


def torchelastic_factory(cls: Callable[[], ClusterEnvironment]) -> EnvFactory:
    """An ``env_factory`` that sets torchrun's variables, then calls ``cls()``."""

    def build(description: Mapping[str, str]) -> ClusterEnvironment:
        os.environ.update(torchelastic_variables(description))
        return cls()

    return build


def local_factory(description: Mapping[str, str]) -> ClusterEnvironment:
    """A :class:`LocalEnvironment` described as the reference launchers describe a rank."""
    os.environ.update(
        {
            "RANK": description["global_rank"],
            "WORLD_SIZE": description["world_size"],
            "LOCAL_RANK": description["local_rank"],
            "NODE_RANK": description["node_rank"],
            "MASTER_ADDR": description["main_address"],
            "MASTER_PORT": description["main_port"],
        }
    )
    return LocalEnvironment()


def slurm_factory(description: Mapping[str, str]) -> ClusterEnvironment:
    """A :class:`SLURMEnvironment` described as ``srun`` describes a task (with the
    rendezvous given by ``MASTER_ADDR`` / ``MASTER_PORT``)."""
    os.environ.update(
        {
            "SLURM_NTASKS": description["world_size"],
            "SLURM_PROCID": description["global_rank"],
            "SLURM_LOCALID": description["local_rank"],
            "SLURM_NODEID": description["node_rank"],
            "SLURM_NODELIST": description["main_address"] or "node001",
            "SLURM_JOB_ID": "4242",
            "SLURM_JOB_NAME": "train",
            "MASTER_ADDR": description["main_address"],
            "MASTER_PORT": description["main_port"],
        }
    )
    return SLURMEnvironment()


def static_factory(description: Mapping[str, str]) -> ClusterEnvironment:
    """A :class:`StaticEnvironment` built from the description; the adapter refuses
    non-integer values with ConfigurationError, as a constructor taking strings would."""

    def number(name: str) -> int:
        try:
            return int(description[name])
        except ValueError:
            raise ConfigurationError(
                f"{name} must be an integer; got {description[name]!r}"
            ) from None

    return StaticEnvironment(
        world_size=number("world_size"),
        global_rank=number("global_rank"),
        local_rank=number("local_rank"),
        node_rank=number("node_rank"),
        main_address=description["main_address"],
        main_port=number("main_port"),
    )


# --------------------------------------------------------------------------- the faults


class _Fault(TorchElasticEnvironment):
    clause: ClassVar[str]


class DetectRaisesEnvironment(_Fault):
    """detect() parses WORLD_SIZE and lets KeyError / ValueError escape."""

    clause = "ENV-1"

    def detect(self) -> bool:
        return int(os.environ["WORLD_SIZE"]) >= 1 and super().detect()


class DetectSetsDefaultsEnvironment(_Fault):
    """detect() fills in a default MASTER_PORT while it looks."""

    clause = "ENV-1"

    def detect(self) -> bool:
        os.environ.setdefault("MASTER_PORT", "29500")
        return super().detect()


class TruthyStringExternalEnvironment(_Fault):
    """creates_processes_externally returns the run id (a str or None), not a bool."""

    clause = "ENV-2"

    @property
    def creates_processes_externally(self) -> bool:
        return os.environ.get("TORCHELASTIC_RUN_ID")  # type: ignore[return-value]


class PortAsStringEnvironment(_Fault):
    """main_port returns MASTER_PORT as the string it read."""

    clause = "ENV-3"

    @property
    def main_port(self) -> int:
        return os.environ.get("MASTER_PORT", "")  # type: ignore[return-value]

    def validate(self) -> None:
        # Validate as the base does, without the port the fault breaks.
        _ = (self.main_address, self.local_rank, self.node_rank)


class OneBasedRankEnvironment(_Fault):
    """global_rank is reported 1-based (RANK + 1)."""

    clause = "ENV-4"

    @property
    def global_rank(self) -> int:
        return read_int("RANK", owner="OneBasedRankEnvironment") + 1

    @property
    def local_rank(self) -> int:
        return read_int("LOCAL_RANK", owner="OneBasedRankEnvironment")


class RankBeyondWorldAcceptedEnvironment(_Fault):
    """global_rank is read without comparing it with WORLD_SIZE, so validate() accepts
    RANK >= WORLD_SIZE."""

    clause = "ENV-5"

    @property
    def global_rank(self) -> int:
        return read_int("RANK", owner="RankBeyondWorldAcceptedEnvironment")


class PortZeroAcceptedEnvironment(_Fault):
    """main_port accepts any non-negative integer, port 0 and 65536 included."""

    clause = "ENV-5"

    @property
    def main_port(self) -> int:
        return read_int("MASTER_PORT", owner="PortZeroAcceptedEnvironment")


class TeardownLeavesVariablesEnvironment(_Fault):
    """validate() exports GLOO_SOCKET_IFNAME for the backend and teardown() never removes it."""

    clause = "ENV-6"

    def validate(self) -> None:
        super().validate()
        os.environ["GLOO_SOCKET_IFNAME"] = "lo"


class TeardownTwiceRaisesEnvironment(_Fault):
    """A second teardown() raises LifecycleError."""

    clause = "ENV-6"

    def __init__(self) -> None:
        self.torn_down = False

    def teardown(self) -> None:
        if self.torn_down:
            raise LifecycleError("already torn down")
        self.torn_down = True


FAULTS: tuple[type[_Fault], ...] = (
    DetectRaisesEnvironment,
    DetectSetsDefaultsEnvironment,
    TruthyStringExternalEnvironment,
    PortAsStringEnvironment,
    OneBasedRankEnvironment,
    RankBeyondWorldAcceptedEnvironment,
    PortZeroAcceptedEnvironment,
    TeardownLeavesVariablesEnvironment,
    TeardownTwiceRaisesEnvironment,
)
"""Every fault-seeded environment; each class's ``clause`` is the clause that rejects it."""
