"""trainspec plugins in Lightning Fabric (single device): every precision flag, every reference
checkpoint IO, the example third-party plugin, and save -> resume bit-exactness."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
import torch

pytest.importorskip("lightning")

from lightning.fabric import Fabric
from lightning.fabric.plugins import CheckpointIO as LightningCheckpointIO
from lightning.fabric.plugins import Precision as LightningPrecision
from lightning.fabric.strategies.strategy import Strategy as LightningStrategy

from tests.bridges._lightning_helpers import (
    FLAGS,
    LIGHTNING_WARNINGS,
    assert_bit_equal,
    resume_matches,
)
from trainspec.bridges.lightning import (
    to_fabric_precision,
    to_fabric_strategy,
    to_lightning_accelerator,
    to_lightning_checkpoint_io,
)
from trainspec.reference.accelerators.cpu import CPUAccelerator
from trainspec.reference.checkpoint_io.background import BackgroundCheckpointIO
from trainspec.reference.checkpoint_io.safetensors_io import SafetensorsCheckpointIO
from trainspec.reference.checkpoint_io.torch_io import TorchCheckpointIO
from trainspec.reference.precisions import precision_for_flag
from trainspec.reference.strategies.single_device import SingleDeviceStrategy

if TYPE_CHECKING:
    from pathlib import Path

    from trainspec import CheckpointIO

pytestmark = [pytest.mark.filterwarnings(w) for w in LIGHTNING_WARNINGS]


def _strategy_fabric(flag: str, io: CheckpointIO | None = None) -> Fabric:
    strategy = SingleDeviceStrategy(precision=precision_for_flag(flag), checkpoint_io=io)
    fabric = Fabric(strategy=to_fabric_strategy(strategy))
    fabric.launch()
    return fabric


@pytest.mark.parametrize("flag", FLAGS)
def test_fabric_with_a_bridged_strategy_resumes_bit_exactly_for_every_flag(
    flag: str, tmp_path: Path
) -> None:
    initial, uninterrupted, resumed = resume_matches(
        lambda: _strategy_fabric(flag), str(tmp_path / "ckpt.pt")
    )
    dtype = precision_for_flag(flag).param_dtype
    assert all(t.dtype == dtype for t in uninterrupted.values())
    assert any(not torch.equal(initial[k], uninterrupted[k]) for k in initial)  # it trained
    assert_bit_equal(uninterrupted, resumed)


@pytest.mark.parametrize("io_name", ["torch", "async"])
def test_fabric_resumes_bit_exactly_through_each_reference_checkpoint_io(
    io_name: str, tmp_path: Path
) -> None:
    def make() -> Fabric:
        io: CheckpointIO = (
            TorchCheckpointIO()
            if io_name == "torch"
            else BackgroundCheckpointIO(TorchCheckpointIO())
        )
        return _strategy_fabric("16-mixed", io)

    _, uninterrupted, resumed = resume_matches(make, str(tmp_path / "ckpt.pt"))
    assert_bit_equal(uninterrupted, resumed)


def test_fabric_saves_and_loads_module_weights_through_safetensors(tmp_path: Path) -> None:
    """safetensors stores a flat dict of tensors: a module's state dict round-trips, bit for
    bit (``fabric.load_raw`` loads it into a module)."""
    fabric = _strategy_fabric("32-true", SafetensorsCheckpointIO())
    model = fabric.setup(torch.nn.Linear(4, 2))
    path = str(tmp_path / "weights.safetensors")
    fabric.save(path, dict(model.state_dict()))
    other = fabric.setup(torch.nn.Linear(4, 2))
    assert not torch.equal(other.weight, model.weight)
    fabric.load_raw(path, other)
    assert torch.equal(other.weight, model.weight)
    with pytest.raises(TypeError):  # a non-tensor value: the IO's TypeError crosses as is
        fabric.save(path, {"step": 3})


def test_bridged_plugins_run_with_lightnings_own_strategy(tmp_path: Path) -> None:
    accelerator = to_lightning_accelerator(CPUAccelerator())
    precision = to_fabric_precision(precision_for_flag("bf16-mixed"))
    io = to_lightning_checkpoint_io(BackgroundCheckpointIO(TorchCheckpointIO()))
    assert isinstance(precision, LightningPrecision)
    assert isinstance(io, LightningCheckpointIO)

    def make() -> Fabric:
        return Fabric(
            accelerator=to_lightning_accelerator(CPUAccelerator()),
            devices=1,
            plugins=[
                to_fabric_precision(precision_for_flag("bf16-mixed")),
                to_lightning_checkpoint_io(BackgroundCheckpointIO(TorchCheckpointIO())),
            ],
        )

    fabric = Fabric(accelerator=accelerator, devices=1, plugins=[precision, io])
    assert fabric.strategy.precision is precision
    assert fabric.strategy.checkpoint_io is io
    _, uninterrupted, resumed = resume_matches(make, str(tmp_path / "ckpt.pt"))
    assert_bit_equal(uninterrupted, resumed)


def test_the_example_plugin_runs_in_fabric_and_resumes_bit_exactly(tmp_path: Path) -> None:
    """examples/trainspec_example (a third-party package): its gzip CheckpointIO and its
    virtual-CPU accelerator, inside a trainspec strategy and as Lightning plugins."""
    example = pytest.importorskip("trainspec_example")

    def make_strategy_fabric() -> Fabric:
        strategy = SingleDeviceStrategy(
            accelerator=example.VirtualCPUAccelerator(2),
            checkpoint_io=example.CompressedCheckpointIO(),
        )
        fabric = Fabric(strategy=to_fabric_strategy(strategy))
        fabric.launch()
        return fabric

    def make_plugin_fabric() -> Fabric:
        return Fabric(
            accelerator=to_lightning_accelerator(example.VirtualCPUAccelerator(2), name="vcpu"),
            devices=1,
            plugins=[to_lightning_checkpoint_io(example.CompressedCheckpointIO())],
        )

    for make in (make_strategy_fabric, make_plugin_fabric):
        _, uninterrupted, resumed = resume_matches(make, str(tmp_path / "ckpt.pt.gz"))
        assert_bit_equal(uninterrupted, resumed)


def test_fabric_strategy_bridge_is_a_lightning_strategy_with_bridged_components() -> None:
    fabric = _strategy_fabric("bf16-true")
    strategy = fabric.strategy
    assert isinstance(strategy, LightningStrategy)
    assert strategy.precision.precision == "bf16-true"
    assert fabric.device == torch.device("cpu")
    assert (fabric.global_rank, fabric.world_size, fabric.is_global_zero) == (0, 1, True)
    value = torch.tensor([3.0])
    assert torch.equal(fabric.all_reduce(value, reduce_op="sum"), value)
    assert torch.equal(fabric.all_gather(value), value)
    assert fabric.broadcast({"a": 1}) == {"a": 1}
    with fabric.init_module():
        module = torch.nn.Linear(2, 2)
    assert module.weight.dtype == torch.bfloat16
