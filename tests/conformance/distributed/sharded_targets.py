"""Sharded distributed targets: the reference FSDPStrategy under both checkpoint layouts, and
fault-seeded sharded implementations, each breaking exactly one rule (see
:data:`SHARDED_FAULTS`). Module-level factories, so every rank of a world can import them."""

from __future__ import annotations

import json
import os
from contextlib import AbstractContextManager, nullcontext
from typing import TYPE_CHECKING, Any, cast

import torch
from torch.distributed.tensor import DTensor

from tests.conformance.distributed.faults import Fault
from tests.conformance.distributed.targets import COLLECTIVE_TIMEOUT
from trainspec.conformance.core import Target
from trainspec.reference.checkpoint_io.distributed import (
    _FORMAT,
    POINTER,
    VERSION_PREFIX,
    DCPCheckpointIO,
    _fsync_directory,
    _remove_quietly,
    _split,
    _write_file,
)
from trainspec.reference.strategies.fsdp import FSDPStrategy

if TYPE_CHECKING:
    from trainspec.types import Checkpoint, PathLike, StorageOptions

__all__ = [
    "SHARDED_CAPABILITIES",
    "SHARDED_FAULTS",
    "fsdp_full_strategy",
    "fsdp_strategy",
]

SHARDED_CAPABILITIES = frozenset(
    {"backward_sync", "sharded_module", "checkpoint_layout", "sharded_checkpoint"}
)
"""What the sharded-layout FSDPStrategy declares (the full layout drops sharded_checkpoint)."""


def _cpu_ranks() -> list[torch.device]:
    return [torch.device("cpu")] * int(os.environ.get("WORLD_SIZE", "1"))


def fsdp_strategy() -> FSDPStrategy:
    """The reference FSDPStrategy, sharded checkpoint layout, on this rank's CPU world."""
    return FSDPStrategy(parallel_devices=_cpu_ranks(), timeout=COLLECTIVE_TIMEOUT)


def fsdp_full_strategy() -> FSDPStrategy:
    """The reference FSDPStrategy, full checkpoint layout."""
    return FSDPStrategy(
        parallel_devices=_cpu_ranks(), timeout=COLLECTIVE_TIMEOUT, checkpoint_layout="full"
    )


# --------------------------------------------------------------------------- faults


class LocalShardStateDictStrategy(FSDPStrategy):
    """Full layout, but module_state_dict returns this rank's local shards (STRAT-14)."""

    def module_state_dict(self, module: torch.nn.Module) -> dict[str, torch.Tensor]:
        from torch.distributed.checkpoint.state_dict import get_model_state_dict

        state = get_model_state_dict(module)
        return {
            k: v.to_local() if isinstance(v, DTensor) else cast("torch.Tensor", v)
            for k, v in state.items()
        }


class LocalNormStrategy(FSDPStrategy):
    """clip_gradients_norm returns (and clips by) the norm of this rank's shards (STRAT-11)."""

    def clip_gradients_norm(
        self,
        module: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        max_norm: float,
        norm_type: float = 2.0,
    ) -> torch.Tensor:
        self.precision.unscale_gradients(optimizer)
        grads = [
            p.grad.to_local() if isinstance(p.grad, DTensor) else p.grad
            for group in optimizer.param_groups
            for p in group["params"]
            if p.grad is not None
        ]
        norm = torch.nn.utils.get_total_norm(grads, norm_type)
        torch.nn.utils.clip_grads_with_norm_(grads, max_norm, norm)
        return norm


class WholeModuleStrategy(FSDPStrategy):
    """sharded_module_context builds the whole module on the device (SHARD-1)."""

    def sharded_module_context(self) -> AbstractContextManager[None]:
        self.require_set_up("sharded_module_context")
        return nullcontext()


class StaleOptimizerStrategy(FSDPStrategy):
    """setup_optimizer returns an optimizer built before setup_module unchanged, still
    holding the parameters fully_shard replaced (STRAT-5)."""

    def setup_optimizer(self, optimizer: torch.optim.Optimizer) -> torch.optim.Optimizer:
        self.require_set_up("setup_optimizer")
        return optimizer


class EagerCommitCheckpointIO(DCPCheckpointIO):
    """Rank 0 writes and commits at once, without waiting for the other ranks' parts
    (DCKPT-2)."""

    def save_checkpoint(
        self, checkpoint: Checkpoint, path: PathLike, storage_options: StorageOptions = None
    ) -> None:
        if self.rank == 0:
            alone = DCPCheckpointIO()
            alone.save_checkpoint(_local(checkpoint), path, storage_options)


class InPlaceCheckpointIO(DCPCheckpointIO):
    """Every rank writes its part straight into the committed save, which it overwrites in
    place, without staging (DCKPT-2)."""

    def save_checkpoint(
        self, checkpoint: Checkpoint, path: PathLike, storage_options: StorageOptions = None
    ) -> None:
        where = os.path.abspath(os.fspath(path))
        tensors: dict[str, torch.Tensor] = {}
        skeleton = _split(checkpoint, tensors)
        self.write_part(tensors, skeleton, os.path.join(where, "v-in-place"))
        if self.rank == 0:
            pointer = json.dumps({"format": _FORMAT, "committed": "v-in-place"}).encode()
            _write_file(os.path.join(where, POINTER), lambda f: f.write(pointer))
        self._agree("commit", where, None)


class StagingLeftBehindCheckpointIO(DCPCheckpointIO):
    """Commits atomically but removes only older committed saves, never the staging data of a
    killed save (DCKPT-2: a later save must leave what one save leaves)."""

    def commit(self, where: str, staging: str, token: str) -> None:
        version = VERSION_PREFIX + token
        os.rename(staging, os.path.join(where, version))
        pointer = json.dumps({"format": _FORMAT, "committed": version}).encode()
        _write_file(os.path.join(where, POINTER + ".tmp"), lambda f: f.write(pointer))
        os.replace(os.path.join(where, POINTER + ".tmp"), os.path.join(where, POINTER))
        _fsync_directory(where)
        for entry in os.listdir(where):
            if entry.startswith(VERSION_PREFIX) and entry != version:
                _remove_quietly(os.path.join(where, entry))


def _local(value: Any) -> Any:
    if isinstance(value, DTensor):
        return value.to_local()
    if isinstance(value, dict):
        return {k: _local(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_local(v) for v in value]
    if isinstance(value, tuple):
        return tuple(_local(v) for v in value)
    return value


def local_shard_state_dict() -> FSDPStrategy:
    return LocalShardStateDictStrategy(
        parallel_devices=_cpu_ranks(), timeout=COLLECTIVE_TIMEOUT, checkpoint_layout="full"
    )


def local_norm() -> FSDPStrategy:
    return LocalNormStrategy(parallel_devices=_cpu_ranks(), timeout=COLLECTIVE_TIMEOUT)


def whole_module() -> FSDPStrategy:
    return WholeModuleStrategy(parallel_devices=_cpu_ranks(), timeout=COLLECTIVE_TIMEOUT)


def stale_optimizer() -> FSDPStrategy:
    return StaleOptimizerStrategy(parallel_devices=_cpu_ranks(), timeout=COLLECTIVE_TIMEOUT)


def eager_commit() -> FSDPStrategy:
    return FSDPStrategy(
        parallel_devices=_cpu_ranks(),
        timeout=COLLECTIVE_TIMEOUT,
        checkpoint_io=EagerCommitCheckpointIO(),
    )


def in_place() -> FSDPStrategy:
    return FSDPStrategy(
        parallel_devices=_cpu_ranks(),
        timeout=COLLECTIVE_TIMEOUT,
        checkpoint_io=InPlaceCheckpointIO(),
    )


def staging_left_behind() -> FSDPStrategy:
    return FSDPStrategy(
        parallel_devices=_cpu_ranks(),
        timeout=COLLECTIVE_TIMEOUT,
        checkpoint_io=StagingLeftBehindCheckpointIO(),
    )


unimportable_fsdp = Target(
    "strategy", lambda: fsdp_strategy(), capabilities=frozenset({"sharded_checkpoint"})
)
"""The reference FSDPStrategy behind a lambda: checks that start processes cannot import it."""


_HERE = "tests.conformance.distributed.sharded_targets"

SHARDED_FAULTS: tuple[Fault, ...] = (
    Fault(
        "full layout state dict holds only the local shard",
        "strategy",
        f"{_HERE}:local_shard_state_dict",
        "check_state_dicts_hold_complete_values_as_the_layout_requires",
        "STRAT-14",
    ),
    Fault(
        "clipping with the local norm",
        "strategy",
        f"{_HERE}:local_norm",
        "check_strategy_clip_gradients_norm_is_the_full_gradient_norm_on_every_rank",
        "STRAT-11",
    ),
    Fault(
        "sharded context materialises the whole module",
        "strategy",
        f"{_HERE}:whole_module",
        "check_sharded_module_context_trains_alike_and_never_holds_the_whole_module",
        "SHARD-1",
    ),
    Fault(
        "optimizer built before setup_module not rebound",
        "strategy",
        f"{_HERE}:stale_optimizer",
        "check_strategy_optimizer_built_before_setup_module_trains_the_set_up_module",
        "STRAT-5",
    ),
    Fault(
        "commit before every rank wrote",
        "strategy",
        f"{_HERE}:eager_commit",
        "check_dckpt_late_rank_sees_the_previous_checkpoint",
        "DCKPT-2",
    ),
    Fault(
        "commit before every rank wrote (killed ranks)",
        "strategy",
        f"{_HERE}:eager_commit",
        "check_dckpt_killed_save_leaves_the_previous_or_the_new_checkpoint",
        "DCKPT-2",
    ),
    Fault(
        "writes in place without staging",
        "strategy",
        f"{_HERE}:in_place",
        "check_dckpt_killed_save_leaves_the_previous_or_the_new_checkpoint",
        "DCKPT-2",
    ),
    Fault(
        "staging data of a killed save left behind",
        "strategy",
        f"{_HERE}:staging_left_behind",
        "check_dckpt_killed_save_leaves_the_previous_or_the_new_checkpoint",
        "DCKPT-2",
    ),
)
"""Each sharded fault and the check that must reject it."""
