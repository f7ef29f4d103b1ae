"""SingleDeviceStrategy and the StrategyBase behaviour it inherits: components, ranks,
lifecycle, precision delegation, device transfer, collectives and checkpoints."""

from __future__ import annotations

import dataclasses
import inspect
import math
from collections import OrderedDict, defaultdict
from typing import Any, NamedTuple

import pytest
import torch

from trainspec import (
    BackwardSyncControl,
    CheckpointWriteError,
    ConfigurationError,
    LifecycleError,
    Strategy,
)
from trainspec.reference.accelerators.cpu import CPUAccelerator
from trainspec.reference.checkpoint_io.background import BackgroundCheckpointIO
from trainspec.reference.checkpoint_io.memory import MemoryCheckpointIO
from trainspec.reference.checkpoint_io.torch_io import TorchCheckpointIO
from trainspec.reference.collectives import SingleProcessCollective
from trainspec.reference.precisions import (
    BFloat16MixedPrecision,
    Float16MixedPrecision,
    Float32Precision,
    Float64Precision,
)
from trainspec.reference.strategies import SingleDeviceStrategy, StrategyBase

from .conftest import FakeEnvironment, SpyAccelerator, StrategyFactory

CPU = torch.device("cpu")


def _mlp() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))


class _Wrapper(torch.nn.Module):
    def __init__(self, module: torch.nn.Module) -> None:
        super().__init__()
        self.module = module

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.module(x)  # type: ignore[no-any-return]


class WrappingStrategy(SingleDeviceStrategy):
    """Wraps modules the way DDP does, to check that state dicts carry no prefix."""

    def wrap_module(self, module: torch.nn.Module) -> torch.nn.Module:
        return _Wrapper(module)

    def unwrap_module(self, module: torch.nn.Module) -> torch.nn.Module:
        return module.module if isinstance(module, _Wrapper) else module


# -- construction ---------------------------------------------------------------------------


def test_is_a_strategy_with_backward_sync_control(make_strategy: StrategyFactory) -> None:
    strategy = make_strategy(setup=False)
    assert isinstance(strategy, Strategy)
    assert isinstance(strategy, StrategyBase)
    assert isinstance(strategy, BackwardSyncControl)


def test_components_ranks_and_device(
    make_strategy: StrategyFactory, environment: FakeEnvironment
) -> None:
    accelerator, precision, io = CPUAccelerator(), Float64Precision(), MemoryCheckpointIO()
    strategy = make_strategy(
        accelerator=accelerator, precision=precision, checkpoint_io=io, setup=False
    )
    assert strategy.accelerator is accelerator
    assert strategy.precision is precision
    assert strategy.checkpoint_io is io
    assert strategy.cluster_environment is environment
    assert strategy.launcher is None
    assert isinstance(strategy.collective, SingleProcessCollective)
    assert (strategy.global_rank, strategy.local_rank, strategy.node_rank) == (0, 0, 0)
    assert strategy.world_size == 1 and strategy.is_global_zero
    assert strategy.root_device.type == accelerator.device_type
    assert strategy.parallel_devices == [strategy.root_device]
    assert strategy.num_nodes == 1


def test_collective_is_read_only(make_strategy: StrategyFactory) -> None:
    strategy = make_strategy(setup=False)
    with pytest.raises(AttributeError):
        strategy.collective = SingleProcessCollective()  # type: ignore[misc]


@pytest.mark.parametrize("devices", [[CPU, CPU], [], CPU, "cpu"])
def test_more_or_less_than_one_device_is_refused_suggesting_ddp(devices: Any) -> None:
    with pytest.raises(ConfigurationError, match="ddp"):
        SingleDeviceStrategy(parallel_devices=devices, cluster_environment=FakeEnvironment())


def test_several_nodes_are_refused_suggesting_ddp() -> None:
    with pytest.raises(ConfigurationError, match="ddp"):
        SingleDeviceStrategy(num_nodes=2, cluster_environment=FakeEnvironment())


@pytest.mark.parametrize("num_nodes", [0, -1, True, 1.0, "1"])
def test_num_nodes_must_be_a_positive_int(num_nodes: Any) -> None:
    with pytest.raises(ConfigurationError):
        SingleDeviceStrategy(num_nodes=num_nodes, cluster_environment=FakeEnvironment())


@pytest.mark.parametrize(
    "keyword", ["accelerator", "precision", "checkpoint_io", "cluster_environment"]
)
@pytest.mark.parametrize("value", [3, "cpu", object()])
def test_components_of_the_wrong_kind_raise_configuration_error(
    keyword: str, value: object
) -> None:
    kwargs: dict[str, Any] = {"cluster_environment": FakeEnvironment(), keyword: value}
    with pytest.raises(ConfigurationError, match=keyword):
        SingleDeviceStrategy(**kwargs)


def test_a_device_of_another_type_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="cpu"):
        SingleDeviceStrategy(
            parallel_devices=[torch.device("meta")], cluster_environment=FakeEnvironment()
        )


def test_constructor_is_keyword_only() -> None:
    with pytest.raises(TypeError):
        SingleDeviceStrategy(CPUAccelerator())  # type: ignore[misc]


def test_defaults_are_cpu_float32_and_torch_io() -> None:
    strategy = SingleDeviceStrategy(cluster_environment=FakeEnvironment())
    assert strategy.accelerator.device_type == "cpu"
    assert strategy.precision.flag == "32-true"
    assert isinstance(strategy.checkpoint_io, TorchCheckpointIO)
    assert strategy.root_device == CPU


# -- lifecycle ------------------------------------------------------------------------------


def _step_methods(strategy: SingleDeviceStrategy) -> dict[str, Any]:
    module = torch.nn.Linear(2, 2)
    optimizer = torch.optim.SGD(module.parameters(), lr=0.1)
    loss = module(torch.ones(1, 2)).sum()
    return {
        "setup_module": lambda: strategy.setup_module(module),
        "setup_optimizer": lambda: strategy.setup_optimizer(optimizer),
        "module_init_context": lambda: strategy.module_init_context(),
        "forward_context": lambda: strategy.forward_context(),
        "batch_to_device": lambda: strategy.batch_to_device(torch.ones(1)),
        "process_dataloader": lambda: strategy.process_dataloader(None),  # type: ignore[arg-type]
        "backward": lambda: strategy.backward(loss, module),
        "optimizer_step": lambda: strategy.optimizer_step(optimizer),
        "clip_gradients_norm": lambda: strategy.clip_gradients_norm(module, optimizer, 1.0),
        "all_reduce": lambda: strategy.all_reduce(torch.ones(1)),
        "all_gather": lambda: strategy.all_gather(torch.ones(1)),
        "broadcast": lambda: strategy.broadcast(torch.ones(1)),
        "broadcast_object": lambda: strategy.broadcast_object(1),
        "barrier": lambda: strategy.barrier(),
        "reduce_boolean_decision": lambda: strategy.reduce_boolean_decision(True),
        "module_state_dict": lambda: strategy.module_state_dict(module),
        "load_module_state_dict": lambda: strategy.load_module_state_dict(
            module, module.state_dict()
        ),
        "optimizer_state_dict": lambda: strategy.optimizer_state_dict(optimizer),
        "load_optimizer_state_dict": lambda: strategy.load_optimizer_state_dict(
            optimizer, optimizer.state_dict()
        ),
        "save_checkpoint": lambda: strategy.save_checkpoint({}, "x"),
        "load_checkpoint": lambda: strategy.load_checkpoint("x"),
        "remove_checkpoint": lambda: strategy.remove_checkpoint("x"),
        "no_backward_sync": lambda: strategy.no_backward_sync(module),
    }


STEP_METHODS = sorted(_step_methods(SingleDeviceStrategy(cluster_environment=FakeEnvironment())))


def test_step_method_list_covers_the_protocol() -> None:
    protocol = {
        name
        for name, value in vars(Strategy).items()
        if getattr(value, "__isabstractmethod__", False) and not isinstance(value, property)
    }
    assert protocol - {"setup_environment", "teardown"} <= set(STEP_METHODS)


@pytest.mark.parametrize("method", STEP_METHODS)
def test_step_methods_before_setup_raise_lifecycle_error_naming_the_method(
    make_strategy: StrategyFactory, method: str
) -> None:
    strategy = make_strategy(setup=False)
    with pytest.raises(LifecycleError, match=rf"{method}\(\).*not set up"):
        _step_methods(strategy)[method]()


@pytest.mark.parametrize("method", STEP_METHODS)
def test_step_methods_after_teardown_raise_lifecycle_error(
    make_strategy: StrategyFactory, method: str
) -> None:
    strategy = make_strategy()
    strategy.teardown()
    with pytest.raises(LifecycleError, match="torn down"):
        _step_methods(strategy)[method]()


def test_setup_twice_raises_naming_the_state(make_strategy: StrategyFactory) -> None:
    strategy = make_strategy()
    with pytest.raises(LifecycleError, match=r"setup_environment.*already set up"):
        strategy.setup_environment()


def test_teardown_is_idempotent_and_set_up_works_again(
    make_strategy: StrategyFactory, environment: FakeEnvironment
) -> None:
    accelerator = SpyAccelerator()
    strategy = make_strategy(accelerator=accelerator, setup=False)
    strategy.teardown()  # before setup: a no-op
    assert strategy.lifecycle_state == "not_set_up" and accelerator.teardowns == 0
    strategy.setup_environment()
    assert strategy.lifecycle_state == "set_up"
    assert accelerator.setups == [CPU] and strategy.collective.is_initialized
    strategy.teardown()
    strategy.teardown()
    assert strategy.lifecycle_state == "torn_down"
    assert accelerator.teardowns == 1 and environment.teardowns == 1
    assert not strategy.collective.is_initialized
    strategy.setup_environment()
    assert strategy.all_reduce(torch.tensor(2.0)).item() == 2.0


def test_teardown_tears_down_every_component_even_if_one_raises(
    make_strategy: StrategyFactory, environment: FakeEnvironment
) -> None:
    class FailingIO(MemoryCheckpointIO):
        def teardown(self) -> None:
            raise OSError("flush failed")

    accelerator = SpyAccelerator()
    strategy = make_strategy(accelerator=accelerator, checkpoint_io=FailingIO())
    with pytest.raises(OSError, match="flush failed"):
        strategy.teardown()
    assert accelerator.teardowns == 1 and environment.teardowns == 1
    assert not strategy.collective.is_initialized
    assert strategy.lifecycle_state == "torn_down"
    strategy.teardown()  # no second error


def test_failed_setup_undoes_the_steps_that_succeeded(
    make_strategy: StrategyFactory,
) -> None:
    accelerator = SpyAccelerator()
    strategy = make_strategy(
        accelerator=accelerator,
        cluster_environment=FakeEnvironment(world_size=2),
        setup=False,
    )
    with pytest.raises(ConfigurationError, match="ddp"):
        strategy.setup_environment()
    assert accelerator.setups == [CPU] and accelerator.teardowns == 1
    assert strategy.lifecycle_state == "not_set_up"
    with pytest.raises(LifecycleError):
        strategy.forward_context()


# -- training -------------------------------------------------------------------------------


def test_setup_module_converts_and_moves(make_strategy: StrategyFactory) -> None:
    strategy = make_strategy(precision=Float64Precision())
    module = _mlp()
    set_up = strategy.setup_module(module)
    assert set_up is module
    assert all(p.dtype == torch.float64 and p.device == CPU for p in set_up.parameters())
    optimizer = torch.optim.SGD(set_up.parameters(), lr=0.1)
    assert strategy.setup_optimizer(optimizer) is optimizer


def test_module_init_context_creates_parameters_in_the_param_dtype(
    make_strategy: StrategyFactory,
) -> None:
    strategy = make_strategy(precision=Float64Precision())
    default = torch.get_default_dtype()
    with strategy.module_init_context():
        layer = torch.nn.Linear(2, 2)
    assert layer.weight.dtype == torch.float64
    assert torch.get_default_dtype() == default


def test_forward_context_is_the_precisions(make_strategy: StrategyFactory) -> None:
    strategy = make_strategy(precision=BFloat16MixedPrecision())
    module = strategy.setup_module(_mlp())
    with strategy.forward_context():
        out = module(strategy.batch_to_device(torch.ones(3, 4)))
    assert out.dtype == torch.bfloat16
    assert module(torch.ones(3, 4)).dtype == torch.float32


class _Pair(NamedTuple):
    x: torch.Tensor
    label: str


@dataclasses.dataclass(frozen=True)
class _Batch:
    x: torch.Tensor
    ids: list[int]


def test_batch_to_device_keeps_nested_structures_and_converts(
    make_strategy: StrategyFactory,
) -> None:
    strategy = make_strategy(precision=Float64Precision())
    tensor = torch.ones(2)
    counts: defaultdict[str, list[Any]] = defaultdict(list, {"a": [tensor]})
    batch = {
        "list": [tensor, 3, "s", None],
        "tuple": (tensor, 1.5),
        "named": _Pair(tensor, "lbl"),
        "ordered": OrderedDict(k=tensor),
        "default": counts,
        "data": _Batch(tensor, [1, 2]),
        "ints": torch.arange(3),
    }
    moved = strategy.batch_to_device(batch)
    assert moved["list"][1:] == [3, "s", None]
    assert moved["list"][0].dtype == torch.float64
    assert isinstance(moved["tuple"], tuple) and moved["tuple"][1] == 1.5
    assert isinstance(moved["named"], _Pair) and moved["named"].label == "lbl"
    assert isinstance(moved["ordered"], OrderedDict)
    assert isinstance(moved["default"], defaultdict)
    assert moved["default"].default_factory is list
    assert isinstance(moved["data"], _Batch) and moved["data"].ids == [1, 2]
    assert moved["data"].x.device == CPU
    assert moved["ints"].dtype == torch.int64
    assert batch["list"][0].dtype == torch.float32  # the input is not modified


def test_backward_and_optimizer_step_train(make_strategy: StrategyFactory) -> None:
    strategy = make_strategy()
    module = strategy.setup_module(_mlp())
    optimizer = strategy.setup_optimizer(torch.optim.SGD(module.parameters(), lr=0.1))
    before = [p.detach().clone() for p in module.parameters()]
    with strategy.forward_context():
        loss = module(torch.ones(3, 4)).square().mean()
    strategy.backward(loss, module)
    assert all(p.grad is not None for p in module.parameters())
    assert strategy.optimizer_step(optimizer) is True
    assert any(not torch.equal(a, b) for a, b in zip(before, module.parameters(), strict=True))


def test_clip_gradients_norm_returns_the_norm_before_clipping(
    make_strategy: StrategyFactory,
) -> None:
    strategy = make_strategy()
    module = strategy.setup_module(_mlp())
    optimizer = torch.optim.SGD(module.parameters(), lr=0.1)
    strategy.backward(module(torch.ones(3, 4) * 10).sum(), module)
    expected = torch.cat([p.grad.flatten() for p in module.parameters()]).norm()  # type: ignore[union-attr]
    assert expected > 0.5
    norm = strategy.clip_gradients_norm(module, optimizer, max_norm=0.5)
    assert torch.allclose(norm, expected)
    clipped = torch.cat([p.grad.flatten() for p in module.parameters()]).norm()  # type: ignore[union-attr]
    assert math.isclose(clipped.item(), 0.5, rel_tol=1e-4)


def test_clip_gradients_norm_unscales_through_the_precision(
    make_strategy: StrategyFactory,
) -> None:
    strategy = make_strategy(precision=Float16MixedPrecision())
    module = strategy.setup_module(_mlp())
    optimizer = torch.optim.SGD(module.parameters(), lr=0.1)
    with strategy.forward_context():
        loss = module(torch.ones(3, 4)).float().sum() / 1000  # small enough not to overflow
    strategy.backward(loss, module)  # scaled by 2**16 inside
    norm = strategy.clip_gradients_norm(module, optimizer, max_norm=1e9)
    reference = _mlp()
    (reference(torch.ones(3, 4)).sum() / 1000).backward()
    unscaled = torch.cat([p.grad.flatten() for p in reference.parameters()]).norm()  # type: ignore[union-attr]
    assert torch.allclose(norm, unscaled, rtol=1e-2)


@pytest.mark.parametrize(("max_norm", "norm_type"), [(0, 2.0), (-1, 2.0), (1.0, 0), (1.0, -2)])
def test_clip_gradients_norm_refuses_bad_arguments(
    make_strategy: StrategyFactory, max_norm: float, norm_type: float
) -> None:
    strategy = make_strategy()
    module = strategy.setup_module(_mlp())
    optimizer = torch.optim.SGD(module.parameters(), lr=0.1)
    with pytest.raises(ConfigurationError):
        strategy.clip_gradients_norm(module, optimizer, max_norm, norm_type)


def test_process_dataloader_and_no_backward_sync_are_identities(
    make_strategy: StrategyFactory,
) -> None:
    strategy = make_strategy()
    loader = torch.utils.data.DataLoader(list(range(5)), batch_size=2)
    assert strategy.process_dataloader(loader) is loader
    module = strategy.setup_module(_mlp())
    with strategy.no_backward_sync(module):
        strategy.backward(module(torch.ones(1, 4)).sum(), module)
    assert all(p.grad is not None for p in module.parameters())


# -- collectives ----------------------------------------------------------------------------


def test_collectives_delegate_with_mean_as_the_default(make_strategy: StrategyFactory) -> None:
    strategy = make_strategy()
    integers = torch.tensor([1, 2])
    assert strategy.all_reduce(integers).is_floating_point()
    assert strategy.all_reduce(integers, "max").dtype == torch.int64
    assert [t.tolist() for t in strategy.all_gather(integers)] == [[1, 2]]
    assert strategy.broadcast(integers).tolist() == [1, 2]
    assert strategy.broadcast_object({"a": 1}) == {"a": 1}
    strategy.barrier()
    with pytest.raises(ConfigurationError):
        strategy.broadcast(integers, src=1)
    with pytest.raises(ConfigurationError):
        strategy.all_reduce(integers, "avg")  # type: ignore[arg-type]


@pytest.mark.parametrize("decision", [True, False])
def test_reduce_boolean_decision_over_one_rank(
    make_strategy: StrategyFactory, decision: bool
) -> None:
    strategy = make_strategy()
    assert strategy.reduce_boolean_decision(decision) is decision
    assert strategy.reduce_boolean_decision(decision, all=False) is decision


# -- checkpoints ----------------------------------------------------------------------------


def test_module_state_dict_has_no_wrapper_prefix_and_loads_back() -> None:
    strategy = WrappingStrategy(
        checkpoint_io=MemoryCheckpointIO(), cluster_environment=FakeEnvironment()
    )
    strategy.setup_environment()
    try:
        wrapped = strategy.setup_module(_mlp())
        assert isinstance(wrapped, _Wrapper)
        state = strategy.module_state_dict(wrapped)
        assert set(state) == set(_mlp().state_dict())
        assert not any(key.startswith("module.") for key in state)
        fresh = strategy.setup_module(torch.nn.Sequential(*_mlp_layers_zeroed()))
        strategy.load_module_state_dict(fresh, state)
        for key, value in strategy.module_state_dict(fresh).items():
            assert torch.equal(value, state[key])
    finally:
        strategy.teardown()


def _mlp_layers_zeroed() -> list[torch.nn.Module]:
    layers = list(_mlp().children())
    for layer in layers:
        for parameter in layer.parameters():
            torch.nn.init.zeros_(parameter)
    return layers


def test_load_module_state_dict_reports_mismatches_as_configuration_errors(
    make_strategy: StrategyFactory,
) -> None:
    strategy = make_strategy()
    module = strategy.setup_module(_mlp())
    state = strategy.module_state_dict(module)
    missing = {k: v for k, v in state.items() if k != "0.bias"}
    with pytest.raises(ConfigurationError, match=r"0\.bias"):
        strategy.load_module_state_dict(module, missing)
    strategy.load_module_state_dict(module, missing, strict=False)
    wrong_shape = dict(state, **{"0.bias": torch.zeros(3)})
    with pytest.raises(ConfigurationError):
        strategy.load_module_state_dict(module, wrong_shape, strict=False)


def test_optimizer_state_dict_round_trips(make_strategy: StrategyFactory) -> None:
    strategy = make_strategy()
    module = strategy.setup_module(_mlp())
    optimizer = torch.optim.Adam(module.parameters(), lr=0.1)
    strategy.backward(module(torch.ones(2, 4)).sum(), module)
    strategy.optimizer_step(optimizer)
    state = strategy.optimizer_state_dict(optimizer)
    other = torch.optim.Adam(module.parameters(), lr=0.5)
    strategy.load_optimizer_state_dict(other, state)
    assert other.param_groups[0]["lr"] == 0.1
    assert torch.equal(other.state_dict()["state"][0]["exp_avg"], state["state"][0]["exp_avg"])
    with pytest.raises(ConfigurationError):
        strategy.load_optimizer_state_dict(other, {"state": {}, "param_groups": []})


def test_save_and_load_checkpoint_through_the_checkpoint_io(
    make_strategy: StrategyFactory, tmp_path: Any
) -> None:
    strategy = make_strategy(checkpoint_io=TorchCheckpointIO())
    path = tmp_path / "sub" / "ckpt.pt"
    checkpoint = {"weights": torch.arange(4.0), "step": 7}
    strategy.save_checkpoint(checkpoint, path)
    assert path.exists()
    loaded = strategy.load_checkpoint(path)
    assert loaded["step"] == 7 and torch.equal(loaded["weights"], checkpoint["weights"])
    assert loaded["weights"].device == strategy.root_device
    strategy.remove_checkpoint(path)
    strategy.remove_checkpoint(path)
    assert not path.exists()


def test_save_checkpoint_waits_for_asynchronous_io(
    make_strategy: StrategyFactory, tmp_path: Any
) -> None:
    strategy = make_strategy(checkpoint_io=BackgroundCheckpointIO(TorchCheckpointIO()))
    path = tmp_path / "async.pt"
    strategy.save_checkpoint({"x": torch.ones(1000)}, path)
    assert path.exists()
    assert torch.equal(TorchCheckpointIO().load_checkpoint(path)["x"], torch.ones(1000))


class _RecordingIO(MemoryCheckpointIO):
    def __init__(self) -> None:
        super().__init__()
        self.saves: list[str] = []
        self.removes: list[str] = []

    def save_checkpoint(self, checkpoint: Any, path: Any, storage_options: Any = None) -> None:
        self.saves.append(str(path))
        super().save_checkpoint(checkpoint, path, storage_options)

    def remove_checkpoint(self, path: Any) -> None:
        self.removes.append(str(path))
        super().remove_checkpoint(path)


def test_only_global_rank_zero_writes_and_removes() -> None:
    class NotRankZero(SingleDeviceStrategy):
        @property
        def global_rank(self) -> int:
            return 1

    io = _RecordingIO()
    strategy = NotRankZero(checkpoint_io=io, cluster_environment=FakeEnvironment())
    strategy.setup_environment()
    try:
        assert not strategy.is_global_zero
        strategy.save_checkpoint({"a": 1}, "p")
        strategy.remove_checkpoint("p")
        assert io.saves == [] and io.removes == []
    finally:
        strategy.teardown()
    zero_io = _RecordingIO()
    zero = SingleDeviceStrategy(checkpoint_io=zero_io, cluster_environment=FakeEnvironment())
    zero.setup_environment()
    try:
        zero.save_checkpoint({"a": 1}, "p")
        zero.remove_checkpoint("p")
        assert zero_io.saves == ["p"] and zero_io.removes == ["p"]
    finally:
        zero.teardown()


def test_a_failed_save_on_rank_zero_raises_its_own_error(
    make_strategy: StrategyFactory,
) -> None:
    strategy = make_strategy(checkpoint_io=MemoryCheckpointIO(capacity_bytes=10))
    with pytest.raises(CheckpointWriteError):
        strategy.save_checkpoint({"x": torch.ones(100)}, "p")
    with pytest.raises(TypeError):
        strategy.save_checkpoint({"x": 1}, "p", storage_options={"unknown": 1})
    # the strategy is still usable
    strategy.barrier()


def test_subclass_missing_process_dataloader_cannot_be_instantiated() -> None:
    class Incomplete(StrategyBase):
        pass

    with pytest.raises(TypeError, match="process_dataloader"):
        Incomplete(collective=SingleProcessCollective(), cluster_environment=FakeEnvironment())  # type: ignore[abstract]


def test_base_requires_a_collective() -> None:
    class Complete(StrategyBase):
        def process_dataloader(self, dataloader: Any) -> Any:
            return dataloader

    with pytest.raises(ConfigurationError, match="collective"):
        Complete(collective=object(), cluster_environment=FakeEnvironment())  # type: ignore[arg-type]
    strategy = Complete(collective=SingleProcessCollective(), cluster_environment=FakeEnvironment())
    assert not isinstance(strategy, BackwardSyncControl)
    assert strategy.parallel_devices == [CPU]


def test_float32_default_precision_instance_is_fresh_per_strategy() -> None:
    a = SingleDeviceStrategy(cluster_environment=FakeEnvironment())
    b = SingleDeviceStrategy(cluster_environment=FakeEnvironment())
    assert isinstance(a.precision, Float32Precision) and a.precision is not b.precision


def _protocol_methods(protocol: type) -> list[str]:
    return sorted(
        name
        for name, value in vars(protocol).items()
        if getattr(value, "__isabstractmethod__", False) and not isinstance(value, property)
    )


@pytest.mark.parametrize(
    ("protocol", "name"),
    [(Strategy, name) for name in _protocol_methods(Strategy)]
    + [(BackwardSyncControl, name) for name in _protocol_methods(BackwardSyncControl)],
)
def test_signatures_match_the_protocols_exactly(protocol: type, name: str) -> None:
    expected = inspect.signature(getattr(protocol, name)).parameters.values()
    actual = inspect.signature(getattr(SingleDeviceStrategy, name)).parameters.values()
    assert [(p.name, p.kind, p.default) for p in actual] == [
        (p.name, p.kind, p.default) for p in expected
    ]
