"""Fixtures for the single-process strategy stack: a cluster environment that describes a
configurable world (so these tests do not depend on the environments package), spies, and a
factory for set-up strategies."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

import pytest

from trainspec import CheckpointIO, ClusterEnvironment, Precision
from trainspec.reference.accelerators.cpu import CPUAccelerator
from trainspec.reference.checkpoint_io.memory import MemoryCheckpointIO
from trainspec.reference.precisions import Float32Precision
from trainspec.reference.strategies.single_device import SingleDeviceStrategy

if TYPE_CHECKING:
    import torch


class FakeEnvironment(ClusterEnvironment):
    """A cluster environment of ``world_size`` ranks seen from ``global_rank``."""

    def __init__(self, world_size: int = 1, global_rank: int = 0) -> None:
        self._world_size = world_size
        self._global_rank = global_rank
        self.teardowns = 0

    def detect(self) -> bool:
        return True

    @property
    def creates_processes_externally(self) -> bool:
        return False

    @property
    def main_address(self) -> str:
        return "127.0.0.1"

    @property
    def main_port(self) -> int:
        return 29500

    @property
    def world_size(self) -> int:
        return self._world_size

    @property
    def global_rank(self) -> int:
        return self._global_rank

    @property
    def local_rank(self) -> int:
        return self._global_rank

    @property
    def node_rank(self) -> int:
        return 0

    def validate(self) -> None:
        pass

    def teardown(self) -> None:
        self.teardowns += 1


class SpyAccelerator(CPUAccelerator):
    """The CPU accelerator, counting set-ups and tear-downs."""

    def __init__(self) -> None:
        super().__init__()
        self.setups: list[torch.device] = []
        self.teardowns = 0

    def setup_device(self, device: torch.device) -> None:
        super().setup_device(device)
        self.setups.append(device)

    def teardown(self) -> None:
        super().teardown()
        self.teardowns += 1


@pytest.fixture
def environment() -> FakeEnvironment:
    return FakeEnvironment()


StrategyFactory = Callable[..., SingleDeviceStrategy]


@pytest.fixture
def make_strategy(environment: FakeEnvironment) -> Iterator[StrategyFactory]:
    """``make_strategy(precision=None, checkpoint_io=None, setup=True, **kwargs)``: a
    single-device CPU strategy (set up unless ``setup=False``), torn down after the test."""
    made: list[SingleDeviceStrategy] = []

    def make(
        precision: Precision | None = None,
        checkpoint_io: CheckpointIO | None = None,
        setup: bool = True,
        **kwargs: object,
    ) -> SingleDeviceStrategy:
        strategy = SingleDeviceStrategy(
            accelerator=kwargs.pop("accelerator", None) or CPUAccelerator(),  # type: ignore[arg-type]
            precision=precision or Float32Precision(),
            checkpoint_io=checkpoint_io or MemoryCheckpointIO(),
            cluster_environment=kwargs.pop("cluster_environment", None) or environment,  # type: ignore[arg-type]
            **kwargs,  # type: ignore[arg-type]
        )
        if setup:
            strategy.setup_environment()
        made.append(strategy)
        return strategy

    yield make
    for strategy in made:
        strategy.teardown()
