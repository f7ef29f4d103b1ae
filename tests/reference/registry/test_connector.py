"""resolve(): names and instances to a constructed, not set-up strategy; every invalid
argument or combination is a ConfigurationError naming the valid choices."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from trainspec import (
    PRECISION_FLAGS,
    ConfigurationError,
    DeviceUnavailableError,
    LifecycleError,
    Strategy,
)
from trainspec.reference.accelerators.cpu import CPUAccelerator
from trainspec.reference.checkpoint_io.memory import MemoryCheckpointIO
from trainspec.reference.checkpoint_io.torch_io import TorchCheckpointIO
from trainspec.reference.cluster_environments import LocalEnvironment
from trainspec.reference.connector import resolve, resolve_accelerator
from trainspec.reference.precisions import BFloat16MixedPrecision, Float64Precision
from trainspec.reference.registry import Registry
from trainspec.reference.strategies.single_device import SingleDeviceStrategy


def test_defaults_build_a_single_device_cpu_strategy_that_is_not_set_up() -> None:
    strategy = resolve()
    assert isinstance(strategy, SingleDeviceStrategy)
    assert strategy.accelerator.device_type == "cpu"  # no GPU on this machine
    assert strategy.precision.flag == "32-true"
    assert isinstance(strategy.checkpoint_io, TorchCheckpointIO)
    assert isinstance(strategy.cluster_environment, LocalEnvironment)
    assert strategy.root_device == torch.device("cpu")
    with pytest.raises(LifecycleError):
        strategy.forward_context()


@pytest.mark.parametrize("flag", PRECISION_FLAGS)
def test_every_precision_flag_resolves(flag: str) -> None:
    assert resolve(precision=flag).precision.flag == flag


def test_names_and_instances_are_accepted_for_every_component() -> None:
    accelerator, precision, io = CPUAccelerator(), Float64Precision(), MemoryCheckpointIO()
    environment = LocalEnvironment()
    strategy = resolve(
        accelerator=accelerator,
        strategy="single_device",
        devices=1,
        precision=precision,
        checkpoint_io=io,
        cluster_environment=environment,
    )
    assert strategy.accelerator is accelerator
    assert strategy.precision is precision
    assert strategy.checkpoint_io is io
    assert strategy.cluster_environment is environment
    named = resolve(accelerator="cpu", checkpoint_io="memory", cluster_environment="local")
    assert isinstance(named.checkpoint_io, MemoryCheckpointIO)
    assert isinstance(named.cluster_environment, LocalEnvironment)


def test_plugins_fill_in_components_by_kind() -> None:
    precision, io = BFloat16MixedPrecision(), MemoryCheckpointIO()
    strategy = resolve(plugins=[io, precision])
    assert strategy.precision is precision and strategy.checkpoint_io is io


def test_a_strategy_instance_is_returned_as_is() -> None:
    strategy = SingleDeviceStrategy()
    assert resolve(strategy=strategy) is strategy


@pytest.mark.parametrize(
    "kwargs",
    [
        {"precision": "64-true"},
        {"accelerator": "cpu"},
        {"devices": 1},
        {"checkpoint_io": "memory"},
        {"num_nodes": 2},
    ],
)
def test_a_strategy_instance_with_other_components_is_refused(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ConfigurationError, match="constructor"):
        resolve(strategy=SingleDeviceStrategy(), **kwargs)


@pytest.mark.parametrize(
    ("kwargs", "names"),
    [
        ({"accelerator": 3}, ["'cpu'", "Accelerator"]),
        ({"accelerator": None}, ["'cpu'"]),
        ({"accelerator": "tpu-v9"}, ["'cpu'", "pip install"]),
        ({"strategy": 3}, ["'single_device'", "'ddp'"]),
        ({"strategy": "deepspeed"}, ["'single_device'", "'ddp'"]),
        ({"precision": "16"}, list(map(repr, PRECISION_FLAGS))),
        ({"precision": 32}, list(map(repr, PRECISION_FLAGS))),
        ({"precision": None}, ["'32-true'"]),
        ({"checkpoint_io": 1.5}, ["'torch'", "'memory'"]),
        ({"checkpoint_io": "s3"}, ["'torch'", "'memory'"]),
        ({"cluster_environment": 0}, ["'local'"]),
        ({"num_nodes": 0}, ["positive int"]),
        ({"num_nodes": "2"}, ["positive int"]),
        ({"num_nodes": True}, ["positive int"]),
        ({"devices": "two"}, ["-1"]),
        ({"devices": 0}, ["-1"]),
        ({"devices": 1.5}, ["-1"]),
        ({"devices": None}, []),
        ({"plugins": [object()]}, ["Precision", "CheckpointIO"]),
        ({"plugins": "torch"}, ["sequence"]),
        ({"plugins": [Float64Precision(), Float64Precision()]}, ["more than one"]),
        ({"plugins": [Float64Precision()], "precision": "16-true"}, ["both"]),
        ({"plugins": [MemoryCheckpointIO()], "checkpoint_io": "torch"}, ["both"]),
        ({"plugins": [LocalEnvironment()], "cluster_environment": "local"}, ["both"]),
        ({"strategy": "single_device", "devices": 2}, ["ddp"]),
        ({"strategy": "single_device", "num_nodes": 2}, ["ddp"]),
    ],
)
def test_invalid_arguments_raise_configuration_errors_naming_the_choices(
    kwargs: dict[str, Any], names: list[str]
) -> None:
    with pytest.raises(ConfigurationError) as info:
        resolve(**kwargs)
    for name in names:
        assert name in str(info.value)


def test_an_unavailable_accelerator_raises_device_unavailable() -> None:
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    with pytest.raises(DeviceUnavailableError, match="'cpu'"):
        resolve(accelerator="cuda")


def test_auto_accelerator_falls_back_to_the_cpu_here() -> None:
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    assert resolve_accelerator("auto").device_type == "cpu"


def test_auto_accelerator_prefers_an_available_registered_accelerator() -> None:
    class Special(CPUAccelerator):
        @property
        def device_type(self) -> str:
            return "meta"

    registry = Registry()
    registry.register("accelerator", "zz-special", Special)
    assert isinstance(resolve_accelerator("auto", registry=registry), Special)


def test_auto_accelerator_never_prefers_a_cpu_type_plugin_over_the_builtin_cpu() -> None:
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")

    class VirtualCPU(CPUAccelerator):
        pass

    registry = Registry()
    registry.register("accelerator", "aa-virtual-cpu", VirtualCPU)
    chosen = resolve_accelerator("auto", registry=registry)
    assert type(chosen) is CPUAccelerator


def test_a_strategy_factory_that_rejects_the_keywords_is_a_configuration_error() -> None:
    registry = Registry()
    registry.register("strategy", "positional-only", lambda: SingleDeviceStrategy())
    with pytest.raises(ConfigurationError, match="positional-only"):
        resolve(strategy="positional-only", registry=registry)
    registry.register("strategy", "not-a-strategy", lambda **kwargs: object())
    with pytest.raises(ConfigurationError, match=r"trainspec\.Strategy"):
        resolve(strategy="not-a-strategy", registry=registry)


def test_a_component_factory_that_needs_arguments_is_a_configuration_error() -> None:
    registry = Registry()
    registry.register("checkpoint_io", "needs-args", lambda root: MemoryCheckpointIO())
    with pytest.raises(ConfigurationError, match="instance instead"):
        resolve(checkpoint_io="needs-args", registry=registry)
    registry.register("precision", "not-a-precision", lambda: 42)
    with pytest.raises(ConfigurationError, match=r"trainspec\.Precision"):
        resolve(precision="not-a-precision", registry=registry)


def test_resolve_touches_no_device_and_returns_a_settable_strategy() -> None:
    strategy = resolve(precision="bf16-mixed", checkpoint_io="memory")
    assert isinstance(strategy, Strategy)
    strategy.setup_environment()
    try:
        module = strategy.setup_module(torch.nn.Linear(2, 2))
        with strategy.forward_context():
            assert module(torch.ones(1, 2)).dtype == torch.bfloat16
    finally:
        strategy.teardown()


def test_auto_strategy_is_ddp_for_several_devices() -> None:
    from trainspec.reference.strategies.ddp import DDPStrategy

    strategy = resolve(devices=2, precision="bf16-mixed")
    assert isinstance(strategy, DDPStrategy)
    assert strategy.parallel_devices == [torch.device("cpu")] * 2
    assert strategy.precision.flag == "bf16-mixed"
    assert strategy.launcher is not None  # nothing started the ranks yet
    assert isinstance(resolve(strategy="ddp", devices=1), DDPStrategy)


def test_ddp_over_several_nodes_without_a_scheduler_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="torchrun"):
        resolve(devices=2, num_nodes=2)
