"""trainspec -> Lightning: each row of the mapping table (docs/bridges/mapping.md)."""

from __future__ import annotations

import pickle
import subprocess
import sys
from typing import TYPE_CHECKING

import pytest
import torch

pytest.importorskip("lightning")

from lightning.fabric import Fabric
from lightning.fabric.accelerators import ACCELERATOR_REGISTRY
from lightning.fabric.accelerators.registry import _AcceleratorRegistry
from lightning.pytorch.accelerators import Accelerator as PLAccelerator

from tests.bridges._lightning_helpers import LIGHTNING_WARNINGS
from trainspec import (
    CheckpointNotFoundError,
    ConfigurationError,
    LifecycleError,
    UnsafeCheckpointError,
    UnsupportedError,
)
from trainspec.bridges.lightning import (
    NonFiniteNormError,
    to_fabric_precision,
    to_fabric_strategy,
    to_lightning_accelerator,
    to_lightning_checkpoint_io,
    to_lightning_cluster_environment,
    to_trainer_precision,
)
from trainspec.bridges.lightning._mapping import reduce_op_from_lightning
from trainspec.reference.accelerators.cpu import CPUAccelerator
from trainspec.reference.checkpoint_io.torch_io import TorchCheckpointIO
from trainspec.reference.cluster_environments.local import LocalEnvironment
from trainspec.reference.precisions import precision_for_flag
from trainspec.reference.strategies.single_device import SingleDeviceStrategy

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = [pytest.mark.filterwarnings(w) for w in LIGHTNING_WARNINGS]


class _Unpicklable:
    """A class torch's weights-only loader refuses."""


def test_importing_trainspec_imports_neither_torch_nor_lightning() -> None:
    code = (
        "import sys, trainspec, trainspec.bridges; "
        "print(sorted(m for m in ('torch', 'lightning') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# -- Accelerator ------------------------------------------------------------------------------


def test_accelerator_static_members_are_answered_by_the_bound_instance() -> None:
    bridged = to_lightning_accelerator(CPUAccelerator())
    cls = type(bridged)
    assert isinstance(bridged, PLAccelerator)
    assert cls.is_available() is True
    assert cls.name() == "cpu"
    assert cls.parse_devices("2") == [torch.device("cpu")] * 2
    assert cls.parse_devices([torch.device("cpu")]) == [torch.device("cpu")]
    assert cls.get_parallel_devices(2) == [torch.device("cpu")] * 2
    assert cls.auto_device_count() == len(CPUAccelerator().parse_devices("auto"))
    assert cls().trainspec_accelerator is bridged.trainspec_accelerator


@pytest.mark.parametrize("request_", [0, -2, True, "x", [0, 0], 1.5])
def test_bad_device_requests_raise_configuration_errors_that_are_value_errors(
    request_: object,
) -> None:
    cls = type(to_lightning_accelerator(CPUAccelerator()))
    with pytest.raises(ConfigurationError) as info:
        cls.parse_devices(request_)
    assert isinstance(info.value, ValueError)


def test_accelerator_refuses_a_device_of_another_type() -> None:
    with pytest.raises(ConfigurationError):
        to_lightning_accelerator(CPUAccelerator()).setup_device(torch.device("meta"))


def test_get_device_stats_delegates() -> None:
    stats = to_lightning_accelerator(CPUAccelerator()).get_device_stats("cpu")
    assert stats.keys() == CPUAccelerator().get_device_stats(torch.device("cpu")).keys()
    assert all(isinstance(value, float) for value in stats.values())


def test_register_accelerators_registers_the_bridged_class_by_name() -> None:
    registry = _AcceleratorRegistry()
    bridged = to_lightning_accelerator(CPUAccelerator(), name="ts-cpu")
    type(bridged).register_accelerators(registry)
    made = registry.get("ts-cpu")
    assert made.trainspec_accelerator is bridged.trainspec_accelerator
    with pytest.raises(ConfigurationError, match="ts-cpu"):
        type(bridged).register_accelerators(registry)


def test_a_registered_bridged_accelerator_is_selectable_by_name_in_fabric() -> None:
    bridged = to_lightning_accelerator(CPUAccelerator(), name="trainspec-bridge-test")
    type(bridged).register_accelerators(ACCELERATOR_REGISTRY)
    try:
        fabric = Fabric(accelerator="trainspec-bridge-test", devices=1)
        assert type(fabric.accelerator) is type(bridged)
    finally:
        ACCELERATOR_REGISTRY.remove("trainspec-bridge-test")


def test_bridges_refuse_objects_that_are_not_trainspec_implementations() -> None:
    with pytest.raises(ConfigurationError, match="from_lightning"):
        to_lightning_accelerator(object())  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError):
        to_lightning_checkpoint_io(object())  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError):
        to_fabric_strategy(object())  # type: ignore[arg-type]


# -- CheckpointIO -----------------------------------------------------------------------------


def test_checkpoint_io_weights_only_maps_to_the_ios_own_policy(tmp_path: Path) -> None:
    path = str(tmp_path / "unsafe.pt")
    torch.save({"x": _Unpicklable()}, path)
    safe = to_lightning_checkpoint_io(TorchCheckpointIO())
    for weights_only in (None, True, False):  # False permits, the IO's policy decides
        with pytest.raises(UnsafeCheckpointError):
            safe.load_checkpoint(path, weights_only=weights_only)
    trusting = to_lightning_checkpoint_io(TorchCheckpointIO(weights_only=False))
    assert isinstance(trusting.load_checkpoint(path)["x"], _Unpicklable)
    assert isinstance(trusting.load_checkpoint(path, weights_only=False)["x"], _Unpicklable)
    with pytest.raises(UnsupportedError):  # a call cannot narrow a trusting IO
        trusting.load_checkpoint(path, weights_only=True)
    with pytest.raises(ConfigurationError):
        safe.load_checkpoint(path, weights_only="yes")  # type: ignore[arg-type]


def test_checkpoint_io_map_location_forms(tmp_path: Path) -> None:
    io = to_lightning_checkpoint_io(TorchCheckpointIO())
    path = str(tmp_path / "c.pt")
    io.save_checkpoint({"t": torch.ones(2)}, path)
    assert torch.equal(io.load_checkpoint(path, lambda storage, loc: storage)["t"], torch.ones(2))
    assert io.load_checkpoint(path, "cpu")["t"].device.type == "cpu"
    with pytest.raises(UnsupportedError):
        io.load_checkpoint(path, lambda storage, loc: storage.clone())


def test_checkpoint_io_errors_are_trainspec_errors(tmp_path: Path) -> None:
    io = to_lightning_checkpoint_io(TorchCheckpointIO())
    with pytest.raises(CheckpointNotFoundError) as info:
        io.load_checkpoint(str(tmp_path / "missing.pt"))
    assert isinstance(info.value, FileNotFoundError)
    with pytest.raises(TypeError):
        io.save_checkpoint({"t": torch.ones(1)}, str(tmp_path / "c.pt"), {"unknown": 1})
    io.remove_checkpoint(str(tmp_path / "missing.pt"))  # idempotent


# -- ClusterEnvironment -------------------------------------------------------------------------


def test_cluster_environment_is_a_read_only_description(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "NODE_RANK"):
        monkeypatch.delenv(name, raising=False)
    environment = LocalEnvironment()
    bridged = to_lightning_cluster_environment(environment)
    assert type(bridged).detect() == environment.detect()
    assert (bridged.world_size(), bridged.global_rank(), bridged.local_rank()) == (1, 0, 0)
    assert bridged.main_port == environment.main_port
    bridged.set_world_size(1)
    bridged.set_global_rank(0)
    with pytest.raises(UnsupportedError):
        bridged.set_world_size(2)
    with pytest.raises(UnsupportedError):
        bridged.set_global_rank(1)
    bridged.validate_settings(num_devices=1, num_nodes=1)


def test_cluster_environment_validate_settings_runs_the_trainspec_validation(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "5")
    with pytest.raises(ConfigurationError):
        to_lightning_cluster_environment(LocalEnvironment()).validate_settings(1, 1)


# -- Precision --------------------------------------------------------------------------------


def test_precision_is_set_up_on_the_device_of_the_first_tensor_it_sees() -> None:
    bridged = to_fabric_precision(precision_for_flag("bf16-mixed"))
    with pytest.raises(LifecycleError, match="device="):
        bridged.forward_context()
    bridged.convert_input(torch.ones(2))
    with bridged.forward_context():
        assert (torch.ones(2, 2) @ torch.ones(2, 2)).dtype == torch.bfloat16
    explicit = to_trainer_precision(precision_for_flag("bf16-mixed"), device="cpu")
    with explicit.forward_context():
        assert (torch.ones(2, 2) @ torch.ones(2, 2)).dtype == torch.bfloat16


def test_precision_arguments_without_a_counterpart_are_refused() -> None:
    bridged = to_fabric_precision(precision_for_flag("32-true"), device="cpu")
    loss = torch.ones(1, requires_grad=True).sum()
    with pytest.raises(UnsupportedError):
        bridged.backward(loss, None, retain_graph=True)
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.ones(1))], lr=0.1)
    with pytest.raises(UnsupportedError):
        bridged.optimizer_step(optimizer, closure=lambda: None)


def test_precision_state_round_trips_through_the_bridge() -> None:
    bridged = to_fabric_precision(precision_for_flag("16-mixed"), device="cpu")
    other = to_fabric_precision(precision_for_flag("16-mixed"), device="cpu")
    state = bridged.state_dict()
    other.load_state_dict(state)
    assert pickle.dumps(other.state_dict()) == pickle.dumps(state)
    assert bridged.precision == "16-mixed"


# -- Fabric Strategy ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("given", "expected"),
    [(None, "sum"), ("mean", "mean"), ("AVG", "mean"), ("sum", "sum"), ("max", "max")],
)
def test_reduce_ops_map_to_trainspec_names(given: object, expected: str) -> None:
    assert reduce_op_from_lightning(given, "test") == expected
    if isinstance(given, str) and torch.distributed.is_available():
        member = getattr(torch.distributed.ReduceOp, given.upper(), None)
        if member is not None:
            assert reduce_op_from_lightning(member, "test") == expected


def test_an_unknown_reduce_op_names_the_valid_ones() -> None:
    with pytest.raises(ConfigurationError, match="'sum'"):
        reduce_op_from_lightning("median", "test")


def test_strategy_arguments_without_a_counterpart_are_refused() -> None:
    bridged = to_fabric_strategy(SingleDeviceStrategy())
    bridged.setup_environment()
    try:
        with pytest.raises(UnsupportedError):
            bridged.module_init_context(empty_init=True)
        with pytest.raises(UnsupportedError):
            bridged.all_reduce(torch.ones(1), group=object())
        with pytest.raises(UnsupportedError):
            bridged.all_gather(torch.ones(1), sync_grads=True)
        with pytest.raises(UnsupportedError):
            bridged.batch_to_device(torch.ones(1), torch.device("meta"))
        module = bridged.setup_module(torch.nn.Linear(2, 1))
        optimizer = bridged.setup_optimizer(torch.optim.SGD(module.parameters(), lr=0.1))
        with pytest.raises(UnsupportedError):
            bridged.clip_gradients_value(module, optimizer, 1.0)
        module(torch.full((1, 2), float("inf"))).sum().backward()
        with pytest.raises(NonFiniteNormError) as info:
            bridged.clip_gradients_norm(module, optimizer, 1.0)
        assert isinstance(info.value, RuntimeError)
        norm = bridged.clip_gradients_norm(module, optimizer, 1.0, error_if_nonfinite=False)
        assert not torch.isfinite(norm)
    finally:
        bridged.teardown()


@pytest.mark.parametrize("name", ["to_lightning", "from_lightning", "targets"])
def test_each_bridge_module_lists_its_public_names_sorted(name: str) -> None:
    import importlib
    import inspect

    module = importlib.import_module(f"trainspec.bridges.lightning.{name}")
    exported = list(module.__all__)
    assert exported == sorted(exported, key=_isort_key)
    defined = {
        attr
        for attr, value in vars(module).items()
        if not attr.startswith("_")
        and (inspect.isclass(value) or inspect.isfunction(value))
        and value.__module__ == module.__name__
    }
    assert defined <= set(exported)
    assert all(hasattr(module, attr) for attr in exported)


def test_the_package_reexports_both_directions() -> None:
    import trainspec.bridges.lightning as package
    from trainspec.bridges.lightning import from_lightning, to_lightning

    assert set(package.__all__) == set(to_lightning.__all__) | set(from_lightning.__all__)
    assert list(package.__all__) == sorted(package.__all__, key=_isort_key)


def _isort_key(name: str) -> tuple[bool, str]:
    """ruff's isort-style order of ``__all__``: CONSTANTS, then the rest by ASCII."""
    return (not name.isupper(), name)
