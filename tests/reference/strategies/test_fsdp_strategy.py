"""FSDPStrategy without a world: construction refuses bad configurations naming the valid
choices, the checkpoint layout picks the default checkpoint IO (LAYOUT-1), and the strategy
pickles before setup (launchers send it to the ranks). Training on two ranks is tested in
``tests/distributed/test_fsdp.py`` and by the kit (``tests/conformance/distributed``)."""

from __future__ import annotations

import pickle

import pytest
import torch

from trainspec import (
    CheckpointLayoutControl,
    ConfigurationError,
    DistributedCheckpointIO,
    ShardedModuleContext,
    UnsupportedError,
)
from trainspec.conformance.fakes import SingleProcessEnvironment
from trainspec.reference.checkpoint_io.distributed import DCPCheckpointIO
from trainspec.reference.checkpoint_io.torch_io import TorchCheckpointIO
from trainspec.reference.precisions import Float16MixedPrecision
from trainspec.reference.strategies.fsdp import FSDPStrategy

CPU = [torch.device("cpu")]


def test_the_layout_picks_the_default_checkpoint_io() -> None:
    sharded = FSDPStrategy(parallel_devices=CPU)
    assert isinstance(sharded, (CheckpointLayoutControl, ShardedModuleContext))
    assert sharded.checkpoint_layout == "sharded"
    assert isinstance(sharded.checkpoint_io, DistributedCheckpointIO)
    full = FSDPStrategy(parallel_devices=CPU, checkpoint_layout="full")
    assert full.checkpoint_layout == "full"
    assert isinstance(full.checkpoint_io, TorchCheckpointIO)


def test_an_unknown_layout_names_the_valid_ones() -> None:
    with pytest.raises(ConfigurationError, match=r"\['full', 'sharded'\].*'shard'"):
        FSDPStrategy(parallel_devices=CPU, checkpoint_layout="shard")  # type: ignore[arg-type]


def test_the_sharded_layout_needs_a_distributed_checkpoint_io() -> None:
    with pytest.raises(ConfigurationError, match="DistributedCheckpointIO"):
        FSDPStrategy(parallel_devices=CPU, checkpoint_io=TorchCheckpointIO())
    FSDPStrategy(parallel_devices=CPU, checkpoint_io=TorchCheckpointIO(), checkpoint_layout="full")


@pytest.mark.parametrize("policy", ["Linear", [torch.nn.Linear, int], 3])
def test_a_bad_wrap_policy_is_refused(policy: object) -> None:
    with pytest.raises(ConfigurationError, match="wrap_policy"):
        FSDPStrategy(parallel_devices=CPU, wrap_policy=policy)  # type: ignore[arg-type]


def test_wrap_policies_of_classes_and_predicates_are_accepted() -> None:
    FSDPStrategy(parallel_devices=CPU, wrap_policy={torch.nn.Linear})
    FSDPStrategy(parallel_devices=CPU, wrap_policy=lambda module: False)


def test_a_precision_needing_a_gradient_scaler_is_refused_at_setup() -> None:
    strategy = FSDPStrategy(
        parallel_devices=CPU,
        precision=Float16MixedPrecision(),
        cluster_environment=SingleProcessEnvironment(),
    )
    with pytest.raises(UnsupportedError, match="'bf16-mixed'"):
        strategy.setup_environment()
    assert strategy.lifecycle_state == "not_set_up"


def test_the_strategy_pickles_before_setup() -> None:
    strategy = FSDPStrategy(parallel_devices=CPU * 2, checkpoint_io=DCPCheckpointIO())
    copy = pickle.loads(pickle.dumps(strategy))
    assert copy.checkpoint_layout == "sharded" and copy.world_size == strategy.world_size
