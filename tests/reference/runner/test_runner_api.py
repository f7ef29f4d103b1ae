"""Runner: lifecycle (launch, implicit set-up, teardown), launcher use, checkpoint state
handling, optional capabilities and collectives — against the Strategy protocol only."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import pytest
import torch

import trainspec.reference.runner as runner_module
from trainspec import ConfigurationError, Launcher, LifecycleError, StepBoundary
from trainspec.reference.checkpoint_io.memory import MemoryCheckpointIO
from trainspec.reference.collectives.single import SingleProcessCollective
from trainspec.reference.runner import TRAINSPEC_KEY, Runner
from trainspec.reference.strategies.base import StrategyBase
from trainspec.reference.strategies.single_device import SingleDeviceStrategy

if TYPE_CHECKING:
    from collections.abc import Callable

_R = TypeVar("_R")


class RecordingLauncher(Launcher):
    """Runs the function in this process, recording each launch."""

    def __init__(self) -> None:
        self.launches = 0

    @property
    def is_interactive_compatible(self) -> bool:
        return True

    def launch(self, function: Callable[..., _R], *args: Any, **kwargs: Any) -> _R:
        self.launches += 1
        return function(*args, **kwargs)


class LaunchedStrategy(SingleDeviceStrategy):
    def __init__(self, launcher: Launcher, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._test_launcher = launcher

    @property
    def launcher(self) -> Launcher | None:
        return self._test_launcher


class PlainStrategy(StrategyBase):
    """A strategy without optional capabilities."""

    def __init__(self) -> None:
        super().__init__(checkpoint_io=MemoryCheckpointIO(), collective=SingleProcessCollective())

    def process_dataloader(self, dataloader: Any) -> Any:
        self.require_set_up("process_dataloader")
        return dataloader


class SteppingStrategy(SingleDeviceStrategy, StepBoundary):
    def __init__(self) -> None:
        super().__init__(checkpoint_io=MemoryCheckpointIO())
        self.marks = 0

    def mark_step(self) -> None:
        self.marks += 1


@pytest.fixture
def strategy() -> SingleDeviceStrategy:
    return SingleDeviceStrategy(checkpoint_io=MemoryCheckpointIO())


def _setup(runner: Runner) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    module = torch.nn.Linear(3, 2)
    return runner.setup(module, torch.optim.Adam(module.parameters(), lr=0.1))


def test_runner_refuses_what_is_not_a_strategy() -> None:
    with pytest.raises(ConfigurationError, match="Strategy"):
        Runner(3)  # type: ignore[arg-type]


def test_from_config_resolves() -> None:
    runner = Runner.from_config(precision="64-true", checkpoint_io="memory")
    assert runner.strategy.precision.flag == "64-true"
    assert (runner.global_rank, runner.local_rank, runner.node_rank) == (0, 0, 0)
    assert runner.world_size == 1 and runner.is_global_zero
    assert runner.device == torch.device("cpu")


def test_launch_sets_up_runs_with_the_runner_and_tears_down(
    strategy: SingleDeviceStrategy,
) -> None:
    runner = Runner(strategy)

    def fn(inner: Runner, a: int, *, b: int) -> int:
        assert inner is runner
        assert strategy.lifecycle_state == "set_up"
        return int(inner.all_reduce(torch.tensor(a + b), "sum").item())

    assert runner.launch(fn, 2, b=3) == 5
    assert strategy.lifecycle_state == "torn_down"
    assert runner.launch(fn, 1, b=1) == 2  # set up again after teardown


def test_launch_tears_down_when_the_function_raises(strategy: SingleDeviceStrategy) -> None:
    def fn(runner: Runner) -> None:
        raise KeyError("boom")

    with pytest.raises(KeyError, match="boom"):
        Runner(strategy).launch(fn)
    assert strategy.lifecycle_state == "torn_down"


def test_launch_uses_the_strategys_launcher() -> None:
    launcher = RecordingLauncher()
    strategy = LaunchedStrategy(launcher, checkpoint_io=MemoryCheckpointIO())
    runner = Runner(strategy)
    assert runner.launch(lambda r: r.world_size) == 1
    assert launcher.launches == 1
    with pytest.raises(LifecycleError, match="launch"):
        _setup(runner)  # outside launch, with a launcher: the ranks were never started


def test_setup_without_launch_sets_the_environment_up(strategy: SingleDeviceStrategy) -> None:
    runner = Runner(strategy)
    with pytest.raises(LifecycleError):
        runner.to_device(torch.ones(1))  # per-step calls do not set up implicitly
    _module, _optimizer = _setup(runner)
    assert strategy.lifecycle_state == "set_up"
    with pytest.raises(LifecycleError, match="teardown"):
        runner.launch(lambda r: None)
    runner.teardown()
    runner.teardown()
    assert strategy.lifecycle_state == "torn_down"
    _setup(runner)  # again after teardown
    assert strategy.lifecycle_state == "set_up"
    runner.teardown()


def test_context_manager_tears_down(strategy: SingleDeviceStrategy) -> None:
    with Runner(strategy) as runner:
        runner.setup_module(torch.nn.Linear(1, 1))
    assert strategy.lifecycle_state == "torn_down"


def test_per_step_methods_delegate(strategy: SingleDeviceStrategy) -> None:
    with Runner(strategy) as runner:
        with runner.init_module():
            module = torch.nn.Linear(3, 1)
        module, optimizer = runner.setup(module, torch.optim.SGD(module.parameters(), lr=0.1))
        loader = torch.utils.data.DataLoader(torch.ones(4, 3), batch_size=2)
        assert runner.setup_dataloader(loader) is loader
        before = module.weight.detach().clone()
        for batch in loader:
            with runner.autocast():
                loss = module(runner.to_device(batch)).sum()
            runner.backward(loss, module)
            norm = runner.clip_gradients(module, optimizer, max_norm=1.0)
            assert norm.item() > 0
            assert runner.step(optimizer) is True
            assert module.weight.grad is None  # zero_grad by default
        assert not torch.equal(before, module.weight)
        runner.backward(module(torch.ones(1, 3)).sum(), module)
        runner.step(optimizer, zero_grad=False)
        assert module.weight.grad is not None


def test_no_backward_sync_uses_the_capability_or_falls_back() -> None:
    with Runner(SingleDeviceStrategy(checkpoint_io=MemoryCheckpointIO())) as runner:
        module = runner.setup_module(torch.nn.Linear(1, 1))
        with runner.no_backward_sync(module):
            runner.backward(module(torch.ones(1, 1)).sum(), module)
    plain = PlainStrategy()
    with Runner(plain) as runner:
        module = runner.setup_module(torch.nn.Linear(1, 1))
        with runner.no_backward_sync(module):
            runner.backward(module(torch.ones(1, 1)).sum(), module)
        assert module.weight.grad is not None


def test_mark_step_only_on_strategies_with_a_step_boundary() -> None:
    stepping = SteppingStrategy()
    with Runner(stepping) as runner:
        runner.setup_module(torch.nn.Linear(1, 1))
        runner.mark_step()
    assert stepping.marks == 1
    with Runner(PlainStrategy()) as runner:
        runner.setup_module(torch.nn.Linear(1, 1))
        runner.mark_step()  # nothing to do, no error


def test_save_converts_modules_and_optimizers_and_adds_precision_state(
    strategy: SingleDeviceStrategy,
) -> None:
    with Runner(strategy) as runner:
        module, optimizer = _setup(runner)
        runner.save("ckpt", {"module": module, "optimizer": optimizer, "epoch": 2})
        saved = strategy.checkpoint_io.load_checkpoint("ckpt")
    assert set(saved) == {"module", "optimizer", "epoch", TRAINSPEC_KEY}
    assert set(saved["module"]) == {"weight", "bias"}
    assert set(saved["optimizer"]) == {"state", "param_groups"}
    assert saved["epoch"] == 2
    assert saved[TRAINSPEC_KEY]["precision"] == {}


def test_save_refuses_the_reserved_key(strategy: SingleDeviceStrategy) -> None:
    with Runner(strategy) as runner:
        _setup(runner)
        with pytest.raises(ConfigurationError, match=TRAINSPEC_KEY):
            runner.save("ckpt", {TRAINSPEC_KEY: 1})


def test_load_restores_state_and_returns_the_rest(
    strategy: SingleDeviceStrategy, tmp_path: Path
) -> None:
    with Runner(strategy) as runner:
        module, optimizer = _setup(runner)
        runner.save("ckpt", {"module": module, "optimizer": optimizer, "epoch": 2, "extra": "x"})
        fresh = torch.nn.Linear(3, 2)
        torch.nn.init.zeros_(fresh.weight)
        fresh = runner.setup_module(fresh)
        state: dict[str, object] = {"module": fresh, "epoch": 0}
        rest = runner.load("ckpt", state)
        assert state["epoch"] == 2 and state["module"] is fresh
        assert torch.equal(fresh.weight, module.weight)
        assert set(rest) == {"optimizer", "extra"}
        everything = runner.load("ckpt")
        assert set(everything) == {"module", "optimizer", "epoch", "extra"}
        with pytest.raises(ConfigurationError, match="missing_key"):
            runner.load("ckpt", {"missing_key": 1})
        lenient: dict[str, object] = {"missing_key": 1}
        runner.load("ckpt", lenient, strict=False)
        assert lenient == {"missing_key": 1}


def test_collectives_pass_through_with_the_protocol_defaults(
    strategy: SingleDeviceStrategy,
) -> None:
    with Runner(strategy) as runner:
        runner.setup_module(torch.nn.Linear(1, 1))
        assert runner.all_reduce(torch.tensor([1, 3])).is_floating_point()  # mean
        assert [t.tolist() for t in runner.all_gather(torch.tensor([1]))] == [[1]]
        assert runner.broadcast(torch.tensor([4])).tolist() == [4]
        assert runner.broadcast_object({"k": 1}) == {"k": 1}
        runner.barrier()
        assert runner.reduce_boolean_decision(True) is True
        assert runner.reduce_boolean_decision(False, all=False) is False
    for name in ("all_reduce", "broadcast", "broadcast_object", "reduce_boolean_decision"):
        ours = inspect.signature(getattr(Runner, name)).parameters
        theirs = inspect.signature(getattr(SingleDeviceStrategy, name)).parameters
        assert [(p.name, p.default) for p in ours.values()] == [
            (p.name, p.default) for p in theirs.values()
        ]


def test_runner_module_imports_no_reference_implementation() -> None:
    tree = ast.parse(Path(inspect.getfile(runner_module)).read_text(encoding="utf-8"))
    module_level = [
        node for node in tree.body if isinstance(node, (ast.Import, ast.ImportFrom))
    ] + [
        node
        for stmt in tree.body
        if isinstance(stmt, ast.If)
        for node in stmt.body
        if isinstance(node, (ast.Import, ast.ImportFrom))
    ]
    imported = [node.module or "" for node in module_level if isinstance(node, ast.ImportFrom)]
    assert not [name for name in imported if name.startswith("trainspec.reference")]
    nested = [
        node.module
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom)
        and (node.module or "").startswith("trainspec.reference")
    ]
    assert nested == ["trainspec.reference.connector"]  # only inside Runner.from_config
