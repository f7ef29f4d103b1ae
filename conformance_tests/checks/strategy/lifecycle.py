"""STRAT-1 ... STRAT-4: the components conform, ranks and the root device are consistent,
the environment is set up first, and teardown is idempotent and allows setting up again."""

from __future__ import annotations

import tempfile
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from torch.utils.data import DataLoader

from trainspec.accelerator import Accelerator
from trainspec.checkpoint_io import CheckpointIO
from trainspec.cluster_environment import ClusterEnvironment
from trainspec.conformance._helpers import (
    describe_exception,
    describe_value,
    expect_raises,
    failure,
)
from trainspec.conformance.checks.collective import show, tensors_match, values
from trainspec.conformance.checks.strategy._fixtures import (
    _LR,
    IndexDataset,
    _mse,
    _set_up,
    _snippet,
    _teardown_quietly,
    probe_batch,
    probe_module,
)
from trainspec.conformance.core import Target, check
from trainspec.errors import LifecycleError
from trainspec.launcher import Launcher
from trainspec.precision import Precision

if TYPE_CHECKING:
    from collections.abc import Callable

    from trainspec.strategy import Strategy

# --------------------------------------------------------------------------- STRAT-1, STRAT-2


@check("STRAT-1", "strategy")
def check_strategy_components_implement_their_protocols(target: Target[Strategy]) -> None:
    """Each component must implement its protocol and be the same object on every read."""
    strategy = target.make()
    components: list[tuple[str, type]] = [
        ("accelerator", Accelerator),
        ("precision", Precision),
        ("checkpoint_io", CheckpointIO),
        ("cluster_environment", ClusterEnvironment),
    ]
    for name, protocol in components:
        first, second = getattr(strategy, name), getattr(strategy, name)
        repro = _snippet(target, f"print(strategy.{name} is strategy.{name})", set_up=False)
        if not isinstance(first, protocol):
            raise failure(
                target,
                "STRAT-1",
                expected=f"expose a trainspec.{protocol.__name__} as {name}",
                actual=describe_value(first),
                snippet=repro,
            )
        if first is not second:
            raise failure(
                target,
                "STRAT-1",
                expected=f"return the same {name} object on every read",
                actual=f"two different objects ({describe_value(first)}, {describe_value(second)})",
                hint="Create components once, in the constructor.",
                snippet=repro,
            )
    launcher = strategy.launcher
    if launcher is not None and not isinstance(launcher, Launcher):
        raise failure(
            target,
            "STRAT-1",
            expected="expose a trainspec.Launcher or None as launcher",
            actual=describe_value(launcher),
            snippet=_snippet(target, "print(strategy.launcher)", set_up=False),
        )


@check("STRAT-2", "strategy")
def check_strategy_ranks_are_consistent_and_global_zero_is_rank_zero(
    target: Target[Strategy],
) -> None:
    """Ranks must be ints in range, and is_global_zero must be True iff global_rank == 0."""
    with _set_up(target) as strategy:
        world, rank = strategy.world_size, strategy.global_rank
        local, node, zero = strategy.local_rank, strategy.node_rank, strategy.is_global_zero
        shown = (
            f"world_size={world!r}, global_rank={rank!r}, local_rank={local!r}, "
            f"node_rank={node!r}, is_global_zero={zero!r}"
        )
        repro = _snippet(
            target,
            "print(strategy.world_size, strategy.global_rank, strategy.local_rank, "
            "strategy.node_rank, strategy.is_global_zero)",
        )
        ints = all(
            isinstance(v, int) and not isinstance(v, bool) for v in (world, rank, local, node)
        )
        if not ints or not (world >= 1 and 0 <= rank < world and local >= 0 and node >= 0):
            raise failure(
                target,
                "STRAT-2",
                expected="report int ranks with world_size >= 1, 0 <= global_rank < "
                "world_size, local_rank >= 0 and node_rank >= 0",
                actual=shown,
                snippet=repro,
            )
        if not isinstance(zero, bool) or zero != (rank == 0):
            raise failure(
                target,
                "STRAT-2",
                expected="report is_global_zero == (global_rank == 0), as a bool",
                actual=shown,
                hint="Derive is_global_zero from global_rank.",
                snippet=repro,
            )


@check("STRAT-2", "strategy")
def check_strategy_root_device_is_of_the_accelerator_type(target: Target[Strategy]) -> None:
    """root_device must be a torch.device whose type is accelerator.device_type."""
    with _set_up(target) as strategy:
        device, wanted = strategy.root_device, strategy.accelerator.device_type
        if not isinstance(device, torch.device) or device.type != wanted:
            raise failure(
                target,
                "STRAT-2",
                expected=f"report a root_device of the accelerator's type {wanted!r}",
                actual=f"root_device={device!r}",
                snippet=_snippet(
                    target, "print(strategy.root_device, strategy.accelerator.device_type)"
                ),
            )


# --------------------------------------------------------------------------- STRAT-3, STRAT-4


@check("STRAT-3", "strategy")
def check_strategy_refuses_training_before_setup_environment(target: Target[Strategy]) -> None:
    """Training, collective and checkpoint methods must raise LifecycleError before setup."""
    strategy = target.make()
    plain = probe_module()
    optimizer = torch.optim.SGD(plain.parameters(), lr=_LR)
    loss = _mse(plain(probe_batch(0)[0]), probe_batch(0)[1])
    tensor = torch.ones(2)
    loader: DataLoader[int] = DataLoader(IndexDataset(4), batch_size=2)
    with tempfile.TemporaryDirectory(prefix="trainspec-strategy-") as directory:
        path = str(Path(directory) / "never.ckpt")

        def forward() -> None:
            with strategy.forward_context():
                pass

        calls: list[tuple[str, Callable[[], object]]] = [
            ("setup_module(module)", partial(strategy.setup_module, plain)),
            ("setup_optimizer(optimizer)", partial(strategy.setup_optimizer, optimizer)),
            ("forward_context()", forward),
            ("batch_to_device(tensor)", partial(strategy.batch_to_device, tensor)),
            ("process_dataloader(loader)", partial(strategy.process_dataloader, loader)),
            ("backward(loss, module)", partial(strategy.backward, loss, plain)),
            ("optimizer_step(optimizer)", partial(strategy.optimizer_step, optimizer)),
            (
                "clip_gradients_norm(module, optimizer, 1.0)",
                partial(strategy.clip_gradients_norm, plain, optimizer, 1.0),
            ),
            ("all_reduce(tensor)", partial(strategy.all_reduce, tensor)),
            ("all_gather(tensor)", partial(strategy.all_gather, tensor)),
            ("broadcast(tensor)", partial(strategy.broadcast, tensor)),
            ("broadcast_object({})", partial(strategy.broadcast_object, {})),
            ("barrier()", strategy.barrier),
            ("reduce_boolean_decision(True)", partial(strategy.reduce_boolean_decision, True)),
            ("module_state_dict(module)", partial(strategy.module_state_dict, plain)),
            (
                "load_module_state_dict(module, state)",
                partial(strategy.load_module_state_dict, plain, plain.state_dict()),
            ),
            ("optimizer_state_dict(optimizer)", partial(strategy.optimizer_state_dict, optimizer)),
            (
                "load_optimizer_state_dict(optimizer, state)",
                partial(strategy.load_optimizer_state_dict, optimizer, optimizer.state_dict()),
            ),
            ("save_checkpoint({}, path)", partial(strategy.save_checkpoint, {}, path)),
            ("load_checkpoint(path)", partial(strategy.load_checkpoint, path)),
            ("remove_checkpoint(path)", partial(strategy.remove_checkpoint, path)),
        ]
        for text, call in calls:
            expect_raises(
                target,
                "STRAT-3",
                LifecycleError,
                call,
                expected=f"raise LifecycleError from {text} before setup_environment()",
                hint="Check the lifecycle state at the top of every step-3/4/5 method.",
                snippet=_snippet(
                    target,
                    "module = probe_module()\n"
                    "optimizer = torch.optim.SGD(module.parameters(), lr=0.5)\n"
                    "loss = module(probe_batch(0)[0]).sum()\ntensor = torch.ones(2)\n"
                    "path = 'never.ckpt'\n"
                    f"strategy.{text}",
                    set_up=False,
                ),
            )


@check("STRAT-4", "strategy")
def check_strategy_teardown_is_idempotent_and_allows_setup_again(
    target: Target[Strategy],
) -> None:
    """Teardown must be idempotent, and setup_environment must work again after it."""
    strategy = target.make()
    strategy.setup_environment()
    try:
        strategy.setup_module(probe_module())
        strategy.teardown()
        try:
            strategy.teardown()
        except Exception as error:
            raise failure(
                target,
                "STRAT-4",
                expected="accept a second teardown() (teardown is idempotent)",
                actual=describe_exception(error),
                hint="Make teardown a no-op when the strategy is not set up.",
                snippet=_snippet(target, "strategy.teardown()\nstrategy.teardown()"),
            ) from error
        repro = _snippet(
            target,
            "strategy.teardown()\nstrategy.setup_environment()\n"
            "module = strategy.setup_module(probe_module())\n"
            "print(strategy.all_reduce(torch.ones(2), 'sum'))",
        )
        try:
            strategy.setup_environment()
            module = strategy.setup_module(probe_module())
            inputs = strategy.batch_to_device(probe_batch(strategy.global_rank)[0])
            with strategy.forward_context():
                module(inputs)
            total = strategy.all_reduce(torch.ones(2, device=strategy.root_device), "sum")
        except Exception as error:
            raise failure(
                target,
                "STRAT-4",
                expected="support setup_environment() and training again after teardown()",
                actual=describe_exception(error),
                hint="Reset every per-run state in teardown (process group, device, flags).",
                snippet=repro,
            ) from error
        want = torch.full((2,), float(strategy.world_size))
        if not tensors_match(total, want):
            raise failure(
                target,
                "STRAT-4",
                expected=f"compute correctly after a new setup (all_reduce sum {values(want)})",
                actual=show(total),
                snippet=repro,
            )
    finally:
        _teardown_quietly(strategy)
