"""Typing cases for :class:`trainspec.Strategy` and the optional strategy capabilities.

Negative cases carry the exact ``# type: ignore[code]`` mypy reports (see case_accelerator.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import AbstractContextManager, nullcontext
from datetime import timedelta
from typing import Any, Literal, TypeVar

import torch
from torch.utils.data import DataLoader
from typing_extensions import assert_type

from trainspec import (
    Accelerator,
    BackwardSyncControl,
    Checkpoint,
    CheckpointIO,
    ClusterEnvironment,
    Launcher,
    PathLike,
    Precision,
    ReduceOp,
    ShardedModuleContext,
    StateDict,
    StepBoundary,
    StorageOptions,
    Strategy,
)

_T = TypeVar("_T")


class _StrategyCore:
    """Every Strategy member except ``launcher`` and ``all_reduce``."""

    def __init__(
        self,
        accelerator: Accelerator,
        precision: Precision,
        checkpoint_io: CheckpointIO,
        cluster_environment: ClusterEnvironment,
    ) -> None:
        self._accelerator = accelerator
        self._precision = precision
        self._checkpoint_io = checkpoint_io
        self._cluster_environment = cluster_environment

    @property
    def accelerator(self) -> Accelerator:
        return self._accelerator

    @property
    def precision(self) -> Precision:
        return self._precision

    @property
    def checkpoint_io(self) -> CheckpointIO:
        return self._checkpoint_io

    @property
    def cluster_environment(self) -> ClusterEnvironment:
        return self._cluster_environment

    @property
    def root_device(self) -> torch.device:
        return torch.device("cpu")

    @property
    def global_rank(self) -> int:
        return 0

    @property
    def local_rank(self) -> int:
        return 0

    @property
    def node_rank(self) -> int:
        return 0

    @property
    def world_size(self) -> int:
        return 1

    @property
    def is_global_zero(self) -> bool:
        return True

    def setup_environment(self) -> None:
        pass

    def setup_module(self, module: torch.nn.Module) -> torch.nn.Module:
        return module

    def setup_optimizer(self, optimizer: torch.optim.Optimizer) -> torch.optim.Optimizer:
        return optimizer

    def teardown(self) -> None:
        pass

    def module_init_context(self) -> AbstractContextManager[None]:
        return nullcontext()

    def forward_context(self) -> AbstractContextManager[None]:
        return nullcontext()

    def batch_to_device(self, batch: _T) -> _T:
        return batch

    def process_dataloader(self, dataloader: DataLoader[_T]) -> DataLoader[_T]:
        return dataloader

    def backward(self, tensor: torch.Tensor, module: torch.nn.Module | None) -> None:
        pass

    def optimizer_step(self, optimizer: torch.optim.Optimizer) -> bool:
        return True

    def clip_gradients_norm(
        self,
        module: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        max_norm: float,
        norm_type: float = 2.0,
    ) -> torch.Tensor:
        return torch.zeros(())

    def all_gather(self, tensor: torch.Tensor, *, timeout: timedelta | None = None) -> list[torch.Tensor]:
        return [tensor.clone()]

    def broadcast(
        self, tensor: torch.Tensor, src: int = 0, *, timeout: timedelta | None = None
    ) -> torch.Tensor:
        return tensor.clone()

    def broadcast_object(self, obj: _T, src: int = 0, *, timeout: timedelta | None = None) -> _T:
        return obj

    def barrier(self, *, timeout: timedelta | None = None) -> None:
        pass

    def reduce_boolean_decision(self, decision: bool, *, all: bool = True) -> bool:
        return decision

    def module_state_dict(self, module: torch.nn.Module) -> dict[str, torch.Tensor]:
        return {}

    def load_module_state_dict(
        self, module: torch.nn.Module, state_dict: Mapping[str, torch.Tensor], strict: bool = True
    ) -> None:
        pass

    def optimizer_state_dict(self, optimizer: torch.optim.Optimizer) -> StateDict:
        return {}

    def load_optimizer_state_dict(
        self, optimizer: torch.optim.Optimizer, state_dict: Mapping[str, Any]
    ) -> None:
        pass

    def save_checkpoint(
        self, checkpoint: Checkpoint, path: PathLike, storage_options: StorageOptions = None
    ) -> None:
        pass

    def load_checkpoint(self, path: PathLike) -> Checkpoint:
        return {}

    def remove_checkpoint(self, path: PathLike) -> None:
        pass


# -- positive -------------------------------------------------------------------------------


class SingleStrategy(_StrategyCore):
    @property
    def launcher(self) -> Launcher | None:
        return None

    def all_reduce(
        self, tensor: torch.Tensor, reduce_op: ReduceOp = "mean", *, timeout: timedelta | None = None
    ) -> torch.Tensor:
        return tensor.clone()


class CapableStrategy(SingleStrategy):
    """A strategy with every optional capability."""

    def no_backward_sync(self, module: torch.nn.Module, enabled: bool = True) -> AbstractContextManager[None]:
        return nullcontext()

    def sharded_module_context(self) -> AbstractContextManager[None]:
        return nullcontext()

    def mark_step(self) -> None:
        pass


def make(cls: type[SingleStrategy], parts: tuple[Accelerator, Precision, CheckpointIO, ClusterEnvironment]) -> None:
    strategy: Strategy = cls(*parts)
    capable: Strategy = CapableStrategy(*parts)
    sync: BackwardSyncControl = CapableStrategy(*parts)
    sharded: ShardedModuleContext = CapableStrategy(*parts)
    step: StepBoundary = CapableStrategy(*parts)
    del strategy, capable, sync, sharded, step


def use_strategy(
    strategy: Strategy,
    module: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    loader: DataLoader[tuple[torch.Tensor, torch.Tensor]],
    batch: tuple[torch.Tensor, torch.Tensor],
) -> None:
    assert_type(strategy.accelerator, Accelerator)
    assert_type(strategy.precision, Precision)
    assert_type(strategy.checkpoint_io, CheckpointIO)
    assert_type(strategy.cluster_environment, ClusterEnvironment)
    assert_type(strategy.launcher, Launcher | None)
    assert_type(strategy.root_device, torch.device)
    assert_type(strategy.is_global_zero, bool)
    assert_type(strategy.setup_module(module), torch.nn.Module)
    assert_type(strategy.setup_optimizer(optimizer), torch.optim.Optimizer)
    assert_type(strategy.batch_to_device(batch), tuple[torch.Tensor, torch.Tensor])
    assert_type(strategy.process_dataloader(loader), DataLoader[tuple[torch.Tensor, torch.Tensor]])
    assert_type(strategy.optimizer_step(optimizer), bool)
    assert_type(strategy.clip_gradients_norm(module, optimizer, 1.0), torch.Tensor)
    assert_type(strategy.all_reduce(batch[0]), torch.Tensor)
    assert_type(strategy.all_reduce(batch[0], "max", timeout=timedelta(seconds=30)), torch.Tensor)
    assert_type(strategy.broadcast_object(["a"], src=0), list[str])
    assert_type(strategy.reduce_boolean_decision(True, all=False), bool)
    assert_type(strategy.module_state_dict(module), dict[str, torch.Tensor])
    assert_type(strategy.optimizer_state_dict(optimizer), dict[str, Any])
    assert_type(strategy.load_checkpoint("ckpt.pt"), dict[str, Any])
    if isinstance(strategy, BackwardSyncControl):
        with strategy.no_backward_sync(module):
            strategy.backward(batch[0].sum(), module)
    if isinstance(strategy, StepBoundary):
        assert_type(strategy.mark_step(), None)


# -- negative -------------------------------------------------------------------------------


class SumOnlyStrategy(_StrategyCore):
    @property
    def launcher(self) -> Launcher | None:
        return None

    def all_reduce(
        self,
        tensor: torch.Tensor,
        reduce_op: Literal["sum"] = "sum",
        *,
        timeout: timedelta | None = None,
    ) -> torch.Tensor:
        return tensor


class ObjectLauncher(_StrategyCore):
    @property
    def launcher(self) -> object:
        return None

    def all_reduce(
        self, tensor: torch.Tensor, reduce_op: ReduceOp = "mean", *, timeout: timedelta | None = None
    ) -> torch.Tensor:
        return tensor


class MissingAllReduce(_StrategyCore):
    @property
    def launcher(self) -> Launcher | None:
        return None


class GeneratorSync(SingleStrategy):
    def no_backward_sync(self, module: torch.nn.Module, enabled: bool = True) -> bool:
        return enabled


class ExplicitMissingLauncher(Strategy, _StrategyCore):
    def all_reduce(
        self, tensor: torch.Tensor, reduce_op: ReduceOp = "mean", *, timeout: timedelta | None = None
    ) -> torch.Tensor:
        return tensor


def misuse_strategy(
    parts: tuple[Accelerator, Precision, CheckpointIO, ClusterEnvironment],
    strategy: Strategy,
    tensor: torch.Tensor,
) -> None:
    sum_only: Strategy = SumOnlyStrategy(*parts)  # type: ignore[assignment]
    object_launcher: Strategy = ObjectLauncher(*parts)  # type: ignore[assignment]
    missing: Strategy = MissingAllReduce(*parts)  # type: ignore[assignment]
    not_a_context: BackwardSyncControl = GeneratorSync(*parts)  # type: ignore[assignment]
    no_capability: StepBoundary = SingleStrategy(*parts)  # type: ignore[assignment]
    abstract = ExplicitMissingLauncher(*parts)  # type: ignore[abstract]
    strategy.all_reduce(tensor, reduce_op="avg")  # type: ignore[arg-type]
    strategy.setup_module(model=torch.nn.Linear(1, 1))  # type: ignore[call-arg]
    strategy.is_global_zero = True  # type: ignore[misc]
    strategy.no_backward_sync(torch.nn.Linear(1, 1))  # type: ignore[attr-defined]
    del sum_only, object_launcher, missing, not_a_context, no_capability, abstract
