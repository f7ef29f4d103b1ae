"""Fault-seeded strategies: each subclasses the reference ``SingleDeviceStrategy`` and breaks
exactly one rule; ``clause`` names the clause whose check must reject it, and ``make`` builds
an instance (some faults only show with a particular precision or device).

Also:

- :class:`MetaAccelerator`, so a strategy can have a root device other than the CPU the
  checkpoint was saved from (the only way to observe "load onto root_device" on a CPU-only
  machine);
- :class:`ThreadDataParallelStrategy`, a correct data-parallel strategy whose ranks are
  threads of this process (on :class:`ThreadCollective`), so the tests can run the strategy
  checks at world size 2 without starting processes.
"""

from __future__ import annotations

from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import TYPE_CHECKING, ClassVar, TypeVar

import torch
from torch.utils.data import DataLoader, DistributedSampler

from tests.conformance.faults.faults_collective import ThreadCollective, ThreadWorld
from trainspec.accelerator import Accelerator
from trainspec.conformance.fakes import StaticEnvironment
from trainspec.errors import ConfigurationError, LifecycleError
from trainspec.reference.accelerators.cpu import CPUAccelerator
from trainspec.reference.precisions import (
    BFloat16MixedPrecision,
    Float16MixedPrecision,
    Float32Precision,
)
from trainspec.reference.strategies.base import StrategyBase
from trainspec.reference.strategies.single_device import SingleDeviceStrategy

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping
    from datetime import timedelta

    from trainspec.precision import Precision
    from trainspec.types import Checkpoint, DeviceRequest, PathLike, ReduceOp, StorageOptions

_T = TypeVar("_T")


# --------------------------------------------------------------------------- helpers


class MetaAccelerator(Accelerator):
    """An accelerator for ``torch.device("meta")``: one always-available device."""

    @property
    def device_type(self) -> str:
        return "meta"

    def is_available(self) -> bool:
        return True

    def device_count(self) -> int:
        return 1

    def parse_devices(self, devices: DeviceRequest) -> list[torch.device]:
        return [torch.device("meta")]

    def setup_device(self, device: torch.device) -> None:
        if device.type != "meta":
            raise ConfigurationError(f"MetaAccelerator manages 'meta' devices; got {device}")

    def teardown(self) -> None:
        pass

    def synchronize(self, device: torch.device) -> None:
        self.setup_device(device)

    def get_device_stats(self, device: torch.device) -> dict[str, float]:
        self.setup_device(device)
        return {}


class MetaDeviceStrategy(SingleDeviceStrategy):
    """The single-device strategy on the meta device. Meta tensors hold no values, so its
    rank vote (used to agree on checkpoint writes) is taken on the CPU."""

    def __init__(self) -> None:
        super().__init__(accelerator=MetaAccelerator(), parallel_devices=[torch.device("meta")])

    def reduce_boolean_decision(self, decision: bool, *, all: bool = True) -> bool:
        self.require_set_up("reduce_boolean_decision")
        return bool(decision)  # one rank: every rank's decision is this one


class ThreadDataParallelStrategy(StrategyBase):
    """A correct data-parallel strategy for one rank of a :class:`ThreadWorld`.

    ``backward`` averages gradients over ranks (all_reduce mean), ``process_dataloader``
    gives each rank a :class:`DistributedSampler` share. Float32 only (the default dtype is
    process-wide, so threads must not change it).
    """

    def __init__(self, world: ThreadWorld, rank: int) -> None:
        super().__init__(
            accelerator=CPUAccelerator(),
            precision=Float32Precision(),
            cluster_environment=StaticEnvironment(
                world_size=world.world_size, global_rank=rank, main_port=29500
            ),
            parallel_devices=[torch.device("cpu")] * world.world_size,
            collective=ThreadCollective(world),
        )

    def backward(self, tensor: torch.Tensor, module: torch.nn.Module | None) -> None:
        super().backward(tensor, module)
        if module is not None and getattr(module, "sync_gradients", True):
            for parameter in module.parameters():
                if parameter.grad is not None:
                    parameter.grad.copy_(self.all_reduce(parameter.grad, "mean"))

    def process_dataloader(self, dataloader: DataLoader[_T]) -> DataLoader[_T]:
        self.require_set_up("process_dataloader")
        sampler: DistributedSampler[_T] = DistributedSampler(
            dataloader.dataset,
            num_replicas=self.world_size,
            rank=self.global_rank,
            shuffle=False,
        )
        return DataLoader(dataloader.dataset, batch_size=dataloader.batch_size, sampler=sampler)

    @contextmanager
    def no_backward_sync(self, module: torch.nn.Module, enabled: bool = True) -> Iterator[None]:
        self.require_set_up("no_backward_sync")
        previous = getattr(module, "sync_gradients", True)
        module.sync_gradients = not enabled  # type: ignore[assignment]
        try:
            yield
        finally:
            module.sync_gradients = previous  # type: ignore[assignment]


# --------------------------------------------------------------------------- the faults


class _Fault(SingleDeviceStrategy):
    clause: ClassVar[str]

    @classmethod
    def make(cls) -> SingleDeviceStrategy:
        return cls()


class ComponentsRebuiltStrategy(_Fault):
    """precision returns a new Float32Precision on every read."""

    clause = "STRAT-1"

    @property
    def precision(self) -> Precision:
        return Float32Precision()


class GlobalZeroWrongStrategy(_Fault):
    """is_global_zero is False on global rank 0."""

    clause = "STRAT-2"

    @property
    def is_global_zero(self) -> bool:
        return self.global_rank == 1


class RootDeviceMetaAfterSetupStrategy(_Fault):
    """Once set up, root_device reports the meta device while the accelerator is the CPU."""

    clause = "STRAT-2"

    @property
    def root_device(self) -> torch.device:
        if self.lifecycle_state == "set_up":
            return torch.device("meta")
        return super().root_device


class SetsUpLazilyStrategy(_Fault):
    """setup_module runs setup_environment itself instead of refusing to run before it."""

    clause = "STRAT-3"

    def setup_module(self, module: torch.nn.Module) -> torch.nn.Module:
        if self.lifecycle_state != "set_up":
            self.setup_environment()
        return super().setup_module(module)


class TeardownTwiceRaisesStrategy(_Fault):
    """A second teardown raises LifecycleError."""

    clause = "STRAT-4"

    def teardown(self) -> None:
        if self.lifecycle_state != "set_up":
            raise LifecycleError("teardown() needs a set-up strategy")
        super().teardown()


class NoSetupAgainStrategy(_Fault):
    """setup_environment refuses to run after a teardown."""

    clause = "STRAT-4"

    def setup_environment(self) -> None:
        if self.lifecycle_state == "torn_down":
            raise LifecycleError("this strategy has been torn down")
        super().setup_environment()


class ReinitialisesModuleStrategy(_Fault):
    """setup_module re-initialises the module's parameters (as a lazy materialisation might)."""

    clause = "STRAT-5"

    def setup_module(self, module: torch.nn.Module) -> torch.nn.Module:
        for child in module.modules():
            reset = getattr(child, "reset_parameters", None)
            if callable(reset):
                reset()
        return super().setup_module(module)


class ForwardContextIgnoresPrecisionStrategy(_Fault):
    """forward_context is a null context, so a bf16-mixed forward computes in float32."""

    clause = "STRAT-6"

    @classmethod
    def make(cls) -> SingleDeviceStrategy:
        return cls(precision=BFloat16MixedPrecision())

    def forward_context(self) -> AbstractContextManager[None]:
        self.require_set_up("forward_context")
        return nullcontext()


def _lists_for_tuples(data: object) -> object:
    if isinstance(data, dict):
        return {key: _lists_for_tuples(value) for key, value in data.items()}
    if isinstance(data, (list, tuple)):
        return [_lists_for_tuples(item) for item in data]
    return data


class FlattensTuplesStrategy(_Fault):
    """batch_to_device returns lists where the batch had tuples (named tuples too)."""

    clause = "STRAT-7"

    def batch_to_device(self, batch: _T) -> _T:
        return _lists_for_tuples(super().batch_to_device(batch))  # type: ignore[return-value]


class DropsLastBatchStrategy(_Fault):
    """process_dataloader rebuilds the loader with drop_last=True, losing samples."""

    clause = "STRAT-8"

    def process_dataloader(self, dataloader: DataLoader[_T]) -> DataLoader[_T]:
        self.require_set_up("process_dataloader")
        return DataLoader(dataloader.dataset, batch_size=dataloader.batch_size, drop_last=True)


class BackwardBypassesPrecisionStrategy(_Fault):
    """backward calls tensor.backward() itself, skipping the 16-mixed loss scaling."""

    clause = "STRAT-9"

    @classmethod
    def make(cls) -> SingleDeviceStrategy:
        return cls(precision=Float16MixedPrecision())

    def backward(self, tensor: torch.Tensor, module: torch.nn.Module | None) -> None:
        self.require_set_up("backward")
        torch.autograd.backward(tensor)


class StepWithoutUpdateStrategy(_Fault):
    """optimizer_step returns True without stepping the optimizer."""

    clause = "STRAT-10"

    def optimizer_step(self, optimizer: torch.optim.Optimizer) -> bool:
        self.require_set_up("optimizer_step")
        return True


class ClipReturnsClippedNormStrategy(_Fault):
    """clip_gradients_norm returns the norm after clipping instead of before."""

    clause = "STRAT-11"

    def clip_gradients_norm(
        self,
        module: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        max_norm: float,
        norm_type: float = 2.0,
    ) -> torch.Tensor:
        super().clip_gradients_norm(module, optimizer, max_norm, norm_type)
        grads = [p.grad for p in module.parameters() if p.grad is not None]
        norms = torch.stack([torch.linalg.vector_norm(g) for g in grads])
        after: torch.Tensor = torch.linalg.vector_norm(norms)
        return after


class AllReduceDefaultSumStrategy(_Fault):
    """all_reduce defaults to "sum" instead of the Collective's "mean"."""

    clause = "STRAT-12"

    def all_reduce(
        self,
        tensor: torch.Tensor,
        reduce_op: ReduceOp = "sum",
        *,
        timeout: timedelta | None = None,
    ) -> torch.Tensor:
        return super().all_reduce(tensor, reduce_op, timeout=timeout)


class InvertedDecisionStrategy(_Fault):
    """reduce_boolean_decision returns the local decision inverted."""

    clause = "STRAT-13"

    def reduce_boolean_decision(self, decision: bool, *, all: bool = True) -> bool:
        self.require_set_up("reduce_boolean_decision")
        return not decision


class PrefixedStateDictStrategy(_Fault):
    """module_state_dict keys carry a "module." prefix."""

    clause = "STRAT-14"

    def module_state_dict(self, module: torch.nn.Module) -> dict[str, torch.Tensor]:
        return {f"module.{k}": v for k, v in super().module_state_dict(module).items()}


class LenientLoadStrategy(_Fault):
    """load_module_state_dict ignores strict and accepts missing and unexpected keys."""

    clause = "STRAT-14"

    def load_module_state_dict(
        self, module: torch.nn.Module, state_dict: Mapping[str, torch.Tensor], strict: bool = True
    ) -> None:
        super().load_module_state_dict(module, state_dict, strict=False)


class StatelessOptimizerStateStrategy(_Fault):
    """optimizer_state_dict keeps only param_groups, dropping the per-parameter state."""

    clause = "STRAT-15"

    def optimizer_state_dict(self, optimizer: torch.optim.Optimizer) -> dict[str, object]:
        return {
            "state": {},
            "param_groups": super().optimizer_state_dict(optimizer)["param_groups"],
        }


class DeferredSaveStrategy(_Fault):
    """save_checkpoint writes beside the path and moves the file into place only at teardown."""

    clause = "STRAT-16"

    def __init__(self) -> None:
        super().__init__()
        self.pending: list[tuple[str, str]] = []

    def save_checkpoint(
        self, checkpoint: Checkpoint, path: PathLike, storage_options: StorageOptions = None
    ) -> None:
        staging = f"{path}.pending"
        super().save_checkpoint(checkpoint, staging, storage_options)
        self.pending.append((staging, str(path)))

    def teardown(self) -> None:
        import os

        for staging, path in self.pending:
            if os.path.exists(staging):
                os.replace(staging, path)
        self.pending.clear()
        super().teardown()


class LoadIgnoresRootDeviceStrategy(MetaDeviceStrategy):
    """load_checkpoint leaves tensors where they were saved (no map_location); on the meta
    device that is the CPU."""

    clause: ClassVar[str] = "STRAT-17"

    @classmethod
    def make(cls) -> SingleDeviceStrategy:
        return cls()

    def load_checkpoint(self, path: PathLike) -> Checkpoint:
        self.require_set_up("load_checkpoint")
        return self.checkpoint_io.load_checkpoint(path)


class RemoveDoesNothingStrategy(_Fault):
    """remove_checkpoint returns without removing anything."""

    clause = "STRAT-17"

    def remove_checkpoint(self, path: PathLike) -> None:
        self.require_set_up("remove_checkpoint")


class NoSyncDropsGradientsStrategy(_Fault):
    """no_backward_sync discards the accumulated gradients when the context exits."""

    clause = "SYNC-1"

    @contextmanager
    def no_backward_sync(self, module: torch.nn.Module, enabled: bool = True) -> Iterator[None]:
        self.require_set_up("no_backward_sync")
        yield
        if enabled:
            module.zero_grad(set_to_none=True)


FAULTS: tuple[type[SingleDeviceStrategy], ...] = (
    ComponentsRebuiltStrategy,
    GlobalZeroWrongStrategy,
    RootDeviceMetaAfterSetupStrategy,
    SetsUpLazilyStrategy,
    TeardownTwiceRaisesStrategy,
    NoSetupAgainStrategy,
    ReinitialisesModuleStrategy,
    ForwardContextIgnoresPrecisionStrategy,
    FlattensTuplesStrategy,
    DropsLastBatchStrategy,
    BackwardBypassesPrecisionStrategy,
    StepWithoutUpdateStrategy,
    ClipReturnsClippedNormStrategy,
    AllReduceDefaultSumStrategy,
    InvertedDecisionStrategy,
    PrefixedStateDictStrategy,
    LenientLoadStrategy,
    StatelessOptimizerStateStrategy,
    DeferredSaveStrategy,
    LoadIgnoresRootDeviceStrategy,
    RemoveDoesNothingStrategy,
    NoSyncDropsGradientsStrategy,
)
"""Every fault-seeded strategy; each class's ``clause`` is the clause that rejects it."""
