"""Behaviour checks for :class:`trainspec.Strategy` (STRAT-1 ... STRAT-17) and its optional
capabilities (SYNC-1, SHARD-1, STEP-1).

Every check makes a fresh strategy, runs ``setup_environment`` (except the lifecycle checks
that must run before it), exercises one rule on :class:`ProbeNet` -- a small deterministic
module -- and tears the strategy down. Expected values are computed independently in float64
on the CPU from the same module and data, and compared within a tolerance that follows the
strategy's precision.

Expected values depend on the rank only through ``global_rank`` and ``world_size``, so the
same checks run on every rank of a world started by a distributed harness. With more than one
rank, the checks that predict gradients, norms or parameters need the ``data_parallel``
capability (every rank holds the whole module and ``backward`` averages gradients over
ranks) and skip without it. Gradient checks also skip when the set-up module's parameters
are not the user's parameters (a sharded or flattened module).

Target options read here:

``checkpoint_dir`` (``str`` or ``os.PathLike``, default: a new temporary directory made by
global rank 0 and broadcast to the other ranks)
    A directory every rank can read, for the checkpoint checks.

Capabilities: ``data_parallel`` (defined here) and the structural ``backward_sync``,
``sharded_module`` and ``step_boundary`` (see :mod:`trainspec.conformance.capabilities`),
which enable the SYNC-1, SHARD-1 and STEP-1 checks.
"""

from __future__ import annotations

import copy
import inspect
import math
import os
import shutil
import tempfile
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Final, NamedTuple

import torch
from torch.utils.data import DataLoader, Dataset

from trainspec.accelerator import Accelerator
from trainspec.capabilities import BackwardSyncControl, ShardedModuleContext, StepBoundary
from trainspec.checkpoint_io import CheckpointIO
from trainspec.cluster_environment import ClusterEnvironment
from trainspec.collective import Collective
from trainspec.conformance._helpers import (
    checkpoint_differences,
    describe_exception,
    describe_value,
    expect_raises,
    failure,
    snippet,
)
from trainspec.conformance.checks.collective import (
    contribution,
    expected_reduction,
    shares_storage,
    show,
    tensors_match,
    values,
)
from trainspec.conformance.core import CheckSkipped, Target, check
from trainspec.errors import (
    CheckpointNotFoundError,
    ConfigurationError,
    LifecycleError,
    TrainspecError,
)
from trainspec.launcher import Launcher
from trainspec.precision import Precision
from trainspec.types import REDUCE_OPS

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from trainspec.strategy import Strategy

__all__ = ["CAPABILITIES", "IndexDataset", "ProbeNet", "probe_batch", "probe_module"]

CAPABILITIES: Final[dict[str, str]] = {
    "data_parallel": "every rank holds the whole module and backward averages gradients over "
    "ranks (DDP-like); lets the checks predict gradients, norms and parameters with more than "
    "one rank",
}

_LR: Final = 0.5
_BATCH: Final = 6

# Relative error allowed (in norm) per dtype; the loosest of the precision's dtypes applies.
_RTOL: Final = {
    torch.float64: 1e-7,
    torch.float32: 1e-4,
    torch.float16: 2e-2,
    torch.bfloat16: 6e-2,
}


# --------------------------------------------------------------------------- the probe


class ProbeNet(torch.nn.Module):
    """The module the strategy checks train: ``4 -> 8 (tanh) -> 3`` and an int64 buffer."""

    def __init__(self) -> None:
        super().__init__()
        self.hidden = torch.nn.Linear(4, 8)
        self.out = torch.nn.Linear(8, 3)
        self.register_buffer("version", torch.tensor(3, dtype=torch.int64))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        result: torch.Tensor = self.out(torch.tanh(self.hidden(x)))
        return result


def probe_module(seed: int = 0) -> ProbeNet:
    """A :class:`ProbeNet` with deterministic weights; the global RNG is left untouched."""
    with torch.random.fork_rng(devices=[]):
        module = ProbeNet()
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for parameter in module.parameters():
            values = torch.randn(parameter.shape, generator=generator, dtype=torch.float64)
            parameter.copy_(values * 0.5)
    return module


def probe_batch(rank: int, size: int = _BATCH) -> tuple[torch.Tensor, torch.Tensor]:
    """Rank ``rank``'s deterministic batch ``(inputs (size, 4), targets (size, 3))``."""
    generator = torch.Generator().manual_seed(1000 + rank)
    inputs = torch.randn(size, 4, generator=generator)
    targets = torch.randn(size, 3, generator=generator)
    return inputs, targets


def _mse(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.mse_loss(output, target.to(output.dtype))


def _expected_grads(batches: list[tuple[torch.Tensor, torch.Tensor]]) -> list[torch.Tensor]:
    """float64 gradients of the mean-squared error, averaged over ``batches`` (one per rank)."""
    total: list[torch.Tensor] | None = None
    for inputs, targets in batches:
        module = probe_module().double()
        loss = _mse(module(inputs.double()), targets.double())
        grads = torch.autograd.grad(loss, list(module.parameters()))
        total = list(grads) if total is None else [t + g for t, g in zip(total, grads, strict=True)]
    assert total is not None
    return [t / len(batches) for t in total]


# --------------------------------------------------------------------------- helpers


def _teardown_quietly(strategy: Strategy) -> None:
    # Cleanup after a check; STRAT-4 checks teardown itself.
    try:
        strategy.teardown()
    except Exception:
        pass


@contextmanager
def _set_up(target: Target[Strategy]) -> Iterator[Strategy]:
    # The global CPU RNG is restored afterwards: module construction and dataloader
    # iteration draw from it, and a check must not change the caller's random stream.
    with torch.random.fork_rng(devices=[]):
        strategy = target.make()
        strategy.setup_environment()
        try:
            yield strategy
        finally:
            _teardown_quietly(strategy)


def _snippet(target: Target[Strategy], body: str, *, set_up: bool = True) -> str:
    head = "strategy.setup_environment()\n" if set_up else ""
    return snippet(
        target,
        head + body,
        var="strategy",
        imports="from trainspec.conformance.checks.strategy import probe_batch, probe_module",
    )


_TRAIN_LINES: Final = (
    "module = strategy.setup_module(probe_module())\n"
    f"optimizer = strategy.setup_optimizer(torch.optim.SGD(module.parameters(), lr={_LR}))\n"
    "x, y = strategy.batch_to_device(probe_batch(strategy.global_rank))\n"
    "with strategy.forward_context():\n"
    "    loss = torch.nn.functional.mse_loss(module(x), y)\n"
    "strategy.backward(loss, module)\n"
)


def _rtol(precision: Precision) -> float:
    return max(_RTOL.get(precision.param_dtype, 1e-4), _RTOL.get(precision.compute_dtype, 1e-4))


def _close(actual: torch.Tensor, expected: torch.Tensor, rtol: float) -> bool:
    """``actual`` is ``expected`` within ``rtol`` relative error in norm (shape must match)."""
    if tuple(actual.shape) != tuple(expected.shape):
        return False
    got = actual.detach().to("cpu", torch.float64)
    want = expected.detach().to("cpu", torch.float64)
    if not bool(torch.isfinite(got).all()):
        return False
    error = float(torch.linalg.vector_norm(got - want))
    return error <= rtol * float(torch.linalg.vector_norm(want)) + rtol * 1e-2


def _need_predictable(target: Target[Strategy], strategy: Strategy) -> None:
    if strategy.world_size > 1 and "data_parallel" not in target.capabilities:
        raise CheckSkipped(
            "predicting results with more than one rank needs the 'data_parallel' capability"
        )


def _own_parameters(module: torch.nn.Module) -> list[torch.nn.Parameter]:
    """The set-up module's parameters, when they are the probe's (same shapes, same order)."""
    parameters = list(module.parameters())
    shapes = [tuple(p.shape) for p in probe_module().parameters()]
    if [tuple(p.shape) for p in parameters] != shapes:
        raise CheckSkipped(
            "the set-up module's parameters are not the module's own (sharded or flattened); "
            "gradient and parameter checks need full parameters"
        )
    return parameters


def _train_parts(
    strategy: Strategy, *, optimizer: Callable[..., torch.optim.Optimizer] | None = None
) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    module = strategy.setup_module(probe_module())
    make = optimizer or partial(torch.optim.SGD, lr=_LR)
    return module, strategy.setup_optimizer(make(module.parameters()))


def _backward_on_rank_batch(
    strategy: Strategy,
    module: torch.nn.Module,
    batch: tuple[torch.Tensor, torch.Tensor] | None = None,
    scale: float = 1.0,
) -> None:
    inputs, targets = strategy.batch_to_device(batch or probe_batch(strategy.global_rank))
    with strategy.forward_context():
        loss = _mse(module(inputs), targets) * scale
    strategy.backward(loss, module)


def _world_batches(strategy: Strategy) -> list[tuple[torch.Tensor, torch.Tensor]]:
    return [probe_batch(rank) for rank in range(strategy.world_size)]


def _grads(parameters: list[torch.nn.Parameter]) -> list[torch.Tensor | None]:
    return [None if p.grad is None else p.grad.detach() for p in parameters]


def _norm(tensors: list[torch.Tensor], norm_type: float = 2.0) -> float:
    flat = torch.cat([t.detach().to("cpu", torch.float64).reshape(-1) for t in tensors])
    return float(torch.linalg.vector_norm(flat, norm_type))


def _same_device(actual: torch.device, expected: torch.device) -> bool:
    if actual.type != expected.type:
        return False
    return actual.index is None or expected.index is None or actual.index == expected.index


@contextmanager
def _shared_directory(target: Target[Strategy], strategy: Strategy) -> Iterator[Path]:
    """A fresh directory every rank sees: under the ``checkpoint_dir`` option, or a temporary
    one made by global rank 0 and broadcast."""
    option = target.options.get("checkpoint_dir")
    if option is not None and not isinstance(option, (str, os.PathLike)):
        raise TypeError(f"conformance option 'checkpoint_dir' must be a path; got {option!r}")
    made = ""
    if strategy.is_global_zero:
        made = tempfile.mkdtemp(
            prefix="trainspec-strategy-", dir=None if option is None else option
        )
    directory = Path(strategy.broadcast_object(made, 0))
    try:
        yield directory
    finally:
        strategy.barrier()
        if strategy.is_global_zero:
            shutil.rmtree(directory, ignore_errors=True)


def _probe_checkpoint() -> dict[str, object]:
    weights = torch.arange(6, dtype=torch.float32).reshape(2, 3) / 4
    return {
        "step": 7,
        "weights": weights,
        "ids": torch.tensor([3, 1, 2], dtype=torch.int64),
        "meta": {"name": "probe", "values": [1, 2.5, None], "pair": (True, "x")},
    }


def _tensors_in(value: object) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, dict):
        return [t for item in value.values() for t in _tensors_in(item)]
    if isinstance(value, (list, tuple)):
        return [t for item in value for t in _tensors_in(item)]
    return []


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


# --------------------------------------------------------------------------- STRAT-5, STRAT-6


@check("STRAT-5", "strategy")
def check_strategy_setup_module_computes_the_same_function(target: Target[Strategy]) -> None:
    """The module setup_module returns must compute the same function, on root_device."""
    with _set_up(target) as strategy:
        inputs = probe_batch(strategy.global_rank)[0]
        expected = probe_module().double()(inputs.double()).detach()
        module = strategy.setup_module(probe_module())
        repro = _snippet(
            target,
            "module = strategy.setup_module(probe_module())\n"
            "x = strategy.batch_to_device(probe_batch(strategy.global_rank)[0])\n"
            "with strategy.forward_context():\n    print(module(x))\n"
            "print(probe_module()(probe_batch(strategy.global_rank)[0]))",
        )
        devices = {p.device for p in module.parameters()}
        if not all(_same_device(d, strategy.root_device) for d in devices):
            raise failure(
                target,
                "STRAT-5",
                expected=f"return a module whose parameters are on root_device "
                f"{strategy.root_device}",
                actual=f"parameters on {sorted(map(str, devices))}",
                snippet=repro,
            )
        with torch.no_grad(), strategy.forward_context():
            output = module(strategy.batch_to_device(inputs))
        rtol = _rtol(strategy.precision)
        if not isinstance(output, torch.Tensor) or not _close(output, expected, rtol):
            raise failure(
                target,
                "STRAT-5",
                expected="return a module that computes the same function as the module "
                f"given to setup_module (within relative error {rtol:g})",
                actual=f"output {show(output)} where {values(expected)} was expected",
                hint="Move and convert the module without re-initialising its parameters.",
                snippet=repro,
            )


@check("STRAT-5", "strategy")
def check_strategy_setup_optimizer_returns_an_optimizer_of_the_module(
    target: Target[Strategy],
) -> None:
    """setup_optimizer must return a torch optimizer over the set-up module's parameters."""
    with _set_up(target) as strategy:
        module, optimizer = _train_parts(strategy)
        owned = {id(p) for p in module.parameters()}
        stepped = [p for group in getattr(optimizer, "param_groups", []) for p in group["params"]]
        if (
            not isinstance(optimizer, torch.optim.Optimizer)
            or not stepped
            or any(id(p) not in owned for p in stepped)
        ):
            raise failure(
                target,
                "STRAT-5",
                expected="return a torch.optim.Optimizer whose parameters are the set-up module's",
                actual=describe_value(optimizer),
                snippet=_snippet(
                    target,
                    "module = strategy.setup_module(probe_module())\n"
                    "print(strategy.setup_optimizer(torch.optim.SGD(module.parameters(), lr=0.5)))",
                ),
            )


def _autocast_state() -> tuple[object, ...]:
    state: list[object] = [torch.get_default_dtype()]
    for device_type in ("cpu", "cuda"):
        try:
            state += [
                torch.is_autocast_enabled(device_type),
                torch.get_autocast_dtype(device_type),
            ]
        except (RuntimeError, TypeError, AttributeError):
            state.append(None)
    return tuple(state)


class _ProbeError(Exception):
    """Raised inside a context to check that it restores state on the way out."""


@check("STRAT-6", "strategy")
def check_strategy_contexts_apply_the_precision_and_restore_state(
    target: Target[Strategy],
) -> None:
    """module_init_context and forward_context must apply the precision and restore state."""
    with _set_up(target) as strategy:
        precision = strategy.precision
        before = _autocast_state()
        with strategy.module_init_context():
            built = torch.nn.Linear(4, 3)
        if built.weight.dtype != precision.param_dtype:
            raise failure(
                target,
                "STRAT-6",
                expected=f"create parameters in param_dtype {precision.param_dtype} inside "
                "module_init_context()",
                actual=f"a Linear weight of {built.weight.dtype}",
                hint="Enter the precision's module_init_context.",
                snippet=_snippet(
                    target,
                    "with strategy.module_init_context():\n"
                    "    print(torch.nn.Linear(4, 3).weight.dtype)",
                ),
            )
        module = strategy.setup_module(probe_module())
        inputs = strategy.batch_to_device(probe_batch(strategy.global_rank)[0])
        with torch.no_grad(), strategy.forward_context():
            output = module(inputs)
        if output.dtype != precision.compute_dtype:
            raise failure(
                target,
                "STRAT-6",
                expected=f"compute in compute_dtype {precision.compute_dtype} inside "
                "forward_context()",
                actual=f"a module output of {output.dtype}",
                hint="Return the precision's forward_context.",
                snippet=_snippet(
                    target,
                    "module = strategy.setup_module(probe_module())\n"
                    "x = strategy.batch_to_device(probe_batch(0)[0])\n"
                    "with strategy.forward_context():\n    print(module(x).dtype)",
                ),
            )
        for name, context in (
            ("module_init_context", strategy.module_init_context),
            ("forward_context", strategy.forward_context),
        ):
            try:
                with context():
                    raise _ProbeError
            except _ProbeError:
                pass
            after = _autocast_state()
            if after != before:
                raise failure(
                    target,
                    "STRAT-6",
                    expected=f"restore the default dtype and autocast state when {name}() "
                    "exits, even by an exception",
                    actual=f"{after} after, {before} before",
                    snippet=_snippet(
                        target,
                        f"try:\n    with strategy.{name}():\n        raise ValueError\n"
                        "except ValueError:\n    pass\nprint(torch.get_default_dtype())",
                    ),
                )


# --------------------------------------------------------------------------- STRAT-7, STRAT-8


class _Pair(NamedTuple):
    first: torch.Tensor
    label: str


def _probe_structure() -> dict[str, object]:
    return {
        "x": torch.tensor([[0.5, -1.25], [2.0, 3.5]]),
        "ids": torch.tensor([1, 2, 3], dtype=torch.int64),
        "pair": (torch.tensor([1.5, 2.5]), "label"),
        "items": [torch.tensor([True, False]), 3, None, 2.5],
        "named": _Pair(torch.tensor([0.25]), "n"),
    }


def _structure_differences(
    original: object, moved: object, device: torch.device, float_dtype: torch.dtype, path: str
) -> list[str]:
    if isinstance(original, torch.Tensor):
        if not isinstance(moved, torch.Tensor):
            return [f"{path}: {describe_value(moved)} instead of a tensor"]
        problems = []
        if not _same_device(moved.device, device):
            problems.append(f"{path}: on {moved.device}, not {device}")
        wanted = float_dtype if original.is_floating_point() else original.dtype
        if moved.dtype != wanted:
            problems.append(f"{path}: dtype {moved.dtype}, not {wanted}")
        elif not moved.is_meta and not tensors_match(moved.cpu(), original):
            problems.append(f"{path}: values {show(moved)}, not {show(original)}")
        return problems
    if type(moved) is not type(original):
        return [f"{path}: {type(moved).__name__} instead of {type(original).__name__}"]
    if isinstance(original, dict):
        assert isinstance(moved, dict)
        if list(moved) != list(original):
            return [f"{path}: keys {list(moved)} instead of {list(original)}"]
        return [
            problem
            for key in original
            for problem in _structure_differences(
                original[key], moved[key], device, float_dtype, f"{path}[{key!r}]"
            )
        ]
    if isinstance(original, (list, tuple)):
        assert isinstance(moved, (list, tuple))
        if len(moved) != len(original):
            return [f"{path}: length {len(moved)} instead of {len(original)}"]
        return [
            problem
            for index, (a, b) in enumerate(zip(original, moved, strict=True))
            for problem in _structure_differences(a, b, device, float_dtype, f"{path}[{index}]")
        ]
    return [] if moved == original else [f"{path}: {moved!r} instead of {original!r}"]


@check("STRAT-7", "strategy")
def check_strategy_batch_to_device_keeps_the_structure(target: Target[Strategy]) -> None:
    """batch_to_device must move and convert every tensor, keeping the nested structure."""
    with _set_up(target) as strategy:
        batch = _probe_structure()
        pristine = copy.deepcopy(batch)
        moved = strategy.batch_to_device(batch)
        float_dtype = strategy.precision.convert_input(torch.zeros(1)).dtype
        problems = _structure_differences(
            pristine, moved, strategy.root_device, float_dtype, "batch"
        )
        problems += [
            f"the input changed at {difference}"
            for difference in checkpoint_differences(pristine, batch, check_sharing=False)
        ]
        if problems:
            raise failure(
                target,
                "STRAT-7",
                expected=f"return the batch with every tensor on {strategy.root_device} "
                f"(floating ones as {float_dtype}), in the same containers, with other values "
                "unchanged",
                actual="; ".join(problems[:4]),
                hint="Rebuild dicts, lists, tuples and named tuples with their own types.",
                snippet=_snippet(
                    target,
                    "from typing import NamedTuple\n"
                    "class Pair(NamedTuple):\n    first: torch.Tensor\n    label: str\n"
                    "batch = {'pair': (torch.ones(2), 'label'), 'named': Pair(torch.ones(1), "
                    "'n'), 'items': [torch.tensor([1, 2]), 3, None]}\n"
                    "print(strategy.batch_to_device(batch))",
                ),
            )


class IndexDataset(Dataset[int]):
    """A map-style dataset whose samples are their own indices."""

    def __init__(self, size: int) -> None:
        self.size = size

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> int:
        if not 0 <= index < self.size:
            raise IndexError(index)
        return index


def _samples_seen(loader: object) -> list[int]:
    seen: list[int] = []
    for batch in loader:  # type: ignore[attr-defined]
        values = batch if isinstance(batch, torch.Tensor) else torch.as_tensor(batch)
        seen.extend(int(v) for v in values.reshape(-1).tolist())
    return seen


@check("STRAT-8", "strategy")
def check_strategy_process_dataloader_shares_are_disjoint_and_complete(
    target: Target[Strategy],
) -> None:
    """process_dataloader must give ranks disjoint shares that together cover every sample."""
    size = 11
    with _set_up(target) as strategy:
        world = strategy.world_size
        loader: DataLoader[int] = DataLoader(IndexDataset(size), batch_size=3, shuffle=False)
        mine = _samples_seen(strategy.process_dataloader(loader))
        everyone = _gather_lists(strategy, mine)
        padded = math.ceil(size / world) * world
        flat = [sample for share in everyone for sample in share]
        missing = sorted(set(range(size)) - set(flat))
        foreign = sorted(set(flat) - set(range(size)))
        repeated = len(flat) - len(set(flat))
        if missing or foreign or repeated > padded - size:
            raise failure(
                target,
                "STRAT-8",
                expected=f"give the {world} rank(s) disjoint shares covering all {size} "
                f"samples (at most {padded - size} repeated as padding)",
                actual=f"shares {everyone}: missing {missing}, unknown {foreign}, "
                f"{repeated} repeated",
                hint="Use a distributed sampler over the whole dataset; never drop the last "
                "partial batch.",
                snippet=_snippet(
                    target,
                    "from trainspec.conformance.checks.strategy import IndexDataset\n"
                    "from torch.utils.data import DataLoader\n"
                    f"loader = DataLoader(IndexDataset({size}), batch_size=3)\n"
                    "print([b.tolist() for b in strategy.process_dataloader(loader)])",
                ),
            )


def _gather_lists(strategy: Strategy, mine: list[int]) -> list[list[int]]:
    """Every rank's list of ints, through the strategy's own all_gather."""
    if strategy.world_size == 1:
        return [mine]
    device = strategy.root_device
    counts = strategy.all_gather(torch.tensor([len(mine)], device=device))
    longest = max(int(c.item()) for c in counts)
    padded = torch.full((longest,), -1, dtype=torch.int64, device=device)
    padded[: len(mine)] = torch.tensor(mine, dtype=torch.int64)
    gathered = strategy.all_gather(padded)
    return [
        [int(v) for v in values.tolist()[: int(count.item())]]
        for values, count in zip(gathered, counts, strict=True)
    ]


# --------------------------------------------------------------------------- STRAT-9 ... STRAT-11


def _gradient_failure(
    target: Target[Strategy],
    clause: str,
    expected: str,
    got: list[torch.Tensor | None],
    want: list[torch.Tensor],
    rtol: float,
) -> None:
    for index, (g, w) in enumerate(zip(got, want, strict=True)):
        if g is None or not _close(g, w, rtol):
            raise failure(
                target,
                clause,
                expected=f"{expected} (within relative error {rtol:g})",
                actual=f"parameter {index}: gradient {show(g)} where {values(w)} was expected",
                snippet=_snippet(
                    target,
                    _TRAIN_LINES
                    + "strategy.precision.unscale_gradients(optimizer)\n"
                    + "print([p.grad for p in module.parameters()])",
                ),
            )


def _unscale(
    target: Target[Strategy], clause: str, strategy: Strategy, optimizer: torch.optim.Optimizer
) -> None:
    """Bring the gradients to their true scale through the strategy's precision; a precision
    that cannot means backward did not go through it."""
    try:
        strategy.precision.unscale_gradients(optimizer)
    except Exception as error:
        raise failure(
            target,
            clause,
            expected="run backward through the precision, leaving gradients that "
            "precision.unscale_gradients(optimizer) can unscale",
            actual=describe_exception(error),
            hint="Call precision.backward(tensor, module) in backward.",
            snippet=_snippet(
                target, _TRAIN_LINES + "strategy.precision.unscale_gradients(optimizer)"
            ),
        ) from error


@check("STRAT-9", "strategy")
def check_strategy_backward_produces_the_synchronised_gradients(target: Target[Strategy]) -> None:
    """backward must produce the true gradients, averaged over ranks when data-parallel."""
    with _set_up(target) as strategy:
        _need_predictable(target, strategy)
        module, optimizer = _train_parts(strategy)
        parameters = _own_parameters(module)
        _backward_on_rank_batch(strategy, module)
        _unscale(target, "STRAT-9", strategy, optimizer)
        _gradient_failure(
            target,
            "STRAT-9",
            "produce the gradients of the loss (the mean over ranks' gradients) after backward",
            _grads(parameters),
            _expected_grads(_world_batches(strategy)),
            _rtol(strategy.precision),
        )
        # Gradients made outside the precision (e.g. an unscaled backward under gradient
        # scaling) can look right yet leave the precision unable to step: it must accept them.
        try:
            strategy.optimizer_step(optimizer)
        except TrainspecError as error:
            raise failure(
                target,
                "STRAT-9",
                expected=(
                    "run backward through its precision, so that the precision's "
                    "optimizer_step accepts the gradients"
                ),
                actual=f"optimizer_step after backward raised {type(error).__name__}: {error}",
                hint="Call self.precision.backward(tensor, module) in backward.",
                snippet=_snippet(target, _TRAIN_LINES + "strategy.optimizer_step(optimizer)"),
            ) from error


@check("STRAT-10", "strategy")
def check_strategy_optimizer_step_updates_the_parameters(target: Target[Strategy]) -> None:
    """optimizer_step must step the optimizer through the precision and return True."""
    with _set_up(target) as strategy:
        _need_predictable(target, strategy)
        module, optimizer = _train_parts(strategy)
        parameters = _own_parameters(module)
        _backward_on_rank_batch(strategy, module)
        stepped = strategy.optimizer_step(optimizer)
        grads = _expected_grads(_world_batches(strategy))
        start = [p.detach().double() for p in probe_module().parameters()]
        want = [p - _LR * g for p, g in zip(start, grads, strict=True)]
        rtol = _rtol(strategy.precision)
        repro = _snippet(
            target,
            _TRAIN_LINES + "print(strategy.optimizer_step(optimizer), list(module.parameters()))",
        )
        if stepped is not True:
            raise failure(
                target,
                "STRAT-10",
                expected="return True from optimizer_step when the parameters were updated",
                actual=describe_value(stepped),
                snippet=repro,
            )
        for index, (p, w, s) in enumerate(zip(parameters, want, start, strict=True)):
            update, wanted = p.detach().double().cpu() - s, w - s
            if not _close(update, wanted, max(rtol, 1e-6) * 4):
                raise failure(
                    target,
                    "STRAT-10",
                    expected=f"update the parameters by one SGD step (lr={_LR})",
                    actual=f"parameter {index} moved by {show(update)} instead of {values(wanted)}",
                    hint="Call the precision's optimizer_step with the optimizer.",
                    snippet=repro,
                )


@check("STRAT-11", "strategy")
def check_strategy_clip_gradients_norm_returns_the_global_norm_before_clipping(
    target: Target[Strategy],
) -> None:
    """clip_gradients_norm must clip to max_norm and return the global norm before clipping."""
    with _set_up(target) as strategy:
        _need_predictable(target, strategy)
        module, optimizer = _train_parts(strategy)
        parameters = _own_parameters(module)
        _backward_on_rank_batch(strategy, module)
        total = _norm(_expected_grads(_world_batches(strategy)))
        max_norm = total / 4
        returned = strategy.clip_gradients_norm(module, optimizer, max_norm)
        # torch divides by (norm + 1e-6) when clipping: allow that much below max_norm.
        rtol = max(_rtol(strategy.precision) * 4, 1e-5)
        repro = _snippet(
            target,
            _TRAIN_LINES
            + f"print(strategy.clip_gradients_norm(module, optimizer, max_norm={max_norm:.6g}))",
        )
        value = float(returned) if isinstance(returned, torch.Tensor) else math.nan
        if not isinstance(returned, torch.Tensor) or not abs(value - total) <= rtol * total:
            raise failure(
                target,
                "STRAT-11",
                expected=f"return the total gradient norm before clipping, {total:.6g}",
                actual=f"{describe_value(returned)} = {value:.6g}",
                hint="Return the norm computed before scaling the gradients down, over the "
                "whole model on every rank.",
                snippet=repro,
            )
        grads = [p.grad for p in parameters if p.grad is not None]
        after = _norm(grads) if grads else math.nan
        if not abs(after - max_norm) <= rtol * max_norm:
            raise failure(
                target,
                "STRAT-11",
                expected=f"clip the gradients to max_norm={max_norm:.6g}",
                actual=f"a gradient norm of {after:.6g} after clipping",
                snippet=repro,
            )


# --------------------------------------------------------------------------- STRAT-12, STRAT-13


@check("STRAT-12", "strategy")
def check_strategy_collective_defaults_match_the_collective_protocol(
    target: Target[Strategy],
) -> None:
    """The strategy's collective methods must take Collective's parameters and defaults."""
    strategy = target.make()
    for name in ("all_reduce", "all_gather", "broadcast", "broadcast_object", "barrier"):
        protocol = inspect.signature(getattr(Collective, name))
        mine = inspect.signature(getattr(strategy, name))
        for parameter in list(protocol.parameters.values())[1:]:  # skip self
            found = mine.parameters.get(parameter.name)
            if (
                found is None
                or found.default != parameter.default
                or (parameter.kind is parameter.KEYWORD_ONLY) != (found.kind is found.KEYWORD_ONLY)
            ):
                default = "" if parameter.default is parameter.empty else f"={parameter.default!r}"
                raise failure(
                    target,
                    "STRAT-12",
                    expected=f"declare {name}(..., {parameter.name}{default}) as "
                    f"Collective.{name} does",
                    actual=f"{name}{mine}",
                    hint="Every strategy uses the Collective's defaults: reduce_op='mean', "
                    "src=0, timeout=None (keyword-only).",
                    snippet=_snippet(
                        target,
                        f"import inspect\nprint(inspect.signature(strategy.{name}))",
                        set_up=False,
                    ),
                )


@check("STRAT-12", "strategy")
def check_strategy_all_reduce_computes_every_reduce_op(target: Target[Strategy]) -> None:
    """all_reduce must compute every op over the ranks (default mean), not modifying inputs."""
    with _set_up(target) as strategy:
        device, rank, world = strategy.root_device, strategy.global_rank, strategy.world_size
        for dtype in (torch.float32, torch.int64):
            contributions = [contribution(r, device, dtype) for r in range(world)]
            ops: list[str | None] = [None, *REDUCE_OPS]
            for op in ops:
                mine = contribution(rank, device, dtype)
                before = mine.clone()
                if op is None:
                    result = strategy.all_reduce(mine)
                else:
                    result = strategy.all_reduce(mine, op)  # type: ignore[arg-type]
                expected = expected_reduction(contributions, "mean" if op is None else op)  # type: ignore[arg-type]
                is_mean = op in (None, "mean")
                dtype_ok = (
                    result.is_floating_point()
                    if is_mean and not dtype.is_floating_point
                    else result.dtype == dtype
                )
                call = "all_reduce(t)" if op is None else f"all_reduce(t, {op!r})"
                repro = _snippet(
                    target,
                    f"t = torch.tensor([[1, -2, 3], [-4, 5, 0]], dtype={dtype}) * "
                    "(strategy.global_rank + 1)\n"
                    f"print(strategy.{call})",
                )
                if not (dtype_ok and tensors_match(result, expected)):
                    raise failure(
                        target,
                        "STRAT-12",
                        expected=f"return {values(expected)} from {call} on rank {rank} of {world}",
                        actual=show(result),
                        hint='The default reduce_op is "mean" (sum / world_size), as on every '
                        "Collective.",
                        snippet=repro,
                    )
                if not torch.equal(mine, before) or result is mine or shares_storage(result, mine):
                    raise failure(
                        target,
                        "STRAT-12",
                        expected=f"leave the input of {call} unchanged and return a new tensor",
                        actual=f"input now {show(mine)}",
                        snippet=repro,
                    )


@check("STRAT-12", "strategy")
def check_strategy_broadcast_and_gather_follow_the_collective_rules(
    target: Target[Strategy],
) -> None:
    """all_gather, broadcast, broadcast_object and barrier must behave as the Collective's."""
    with _set_up(target) as strategy:
        device, rank, world = strategy.root_device, strategy.global_rank, strategy.world_size
        gathered = strategy.all_gather(contribution(rank, device, torch.float32))
        expected = [contribution(r, device, torch.float32) for r in range(world)]
        if not (
            isinstance(gathered, list)
            and len(gathered) == world
            and all(tensors_match(g, e) for g, e in zip(gathered, expected, strict=True))
        ):
            raise failure(
                target,
                "STRAT-12",
                expected=f"return {values(expected)} from all_gather",
                actual=show(gathered),
                snippet=_snippet(target, "print(strategy.all_gather(torch.ones(2)))"),
            )
        for src in range(world):
            result = strategy.broadcast(contribution(rank, device, torch.float32), src)
            if not tensors_match(result, contribution(src, device, torch.float32)):
                raise failure(
                    target,
                    "STRAT-12",
                    expected=f"return rank {src}'s tensor from broadcast(t, src={src})",
                    actual=show(result),
                    snippet=_snippet(target, f"print(strategy.broadcast(torch.ones(2), {src}))"),
                )
            obj = {"rank": rank, "items": [rank, "x"]}
            received = strategy.broadcast_object(obj, src)
            if received != {"rank": src, "items": [src, "x"]} or received is obj:
                raise failure(
                    target,
                    "STRAT-12",
                    expected=f"return a copy of rank {src}'s object from broadcast_object",
                    actual=describe_value(received)
                    + (" (the caller's object)" if received is obj else ""),
                    snippet=_snippet(
                        target, f"obj = {{'rank': 0}}\nprint(strategy.broadcast_object(obj, {src}))"
                    ),
                )
        expect_raises(
            target,
            "STRAT-12",
            ConfigurationError,
            partial(strategy.broadcast, contribution(rank, device, torch.float32), world),
            expected=f"raise ConfigurationError for broadcast(t, src={world}) with world_size "
            f"{world}",
            snippet=_snippet(target, f"strategy.broadcast(torch.ones(2), src={world})"),
        )
        arrived: object = strategy.barrier()
        if arrived is not None:
            raise failure(
                target,
                "STRAT-12",
                expected="return None from barrier()",
                actual=describe_value(arrived),
                snippet=_snippet(target, "print(strategy.barrier())"),
            )


@check("STRAT-13", "strategy")
def check_strategy_reduce_boolean_decision_agrees_across_ranks(target: Target[Strategy]) -> None:
    """reduce_boolean_decision must be the all/any of every rank's decision, on every rank."""
    with _set_up(target) as strategy:
        rank, world = strategy.global_rank, strategy.world_size
        scenarios: list[tuple[str, Callable[[int], bool]]] = [
            ("every rank True", lambda r: True),
            ("every rank False", lambda r: False),
            ("only rank 0 True", lambda r: r == 0),
            (f"only rank {world - 1} False", lambda r: r != world - 1),
        ]
        for what, decide in scenarios:
            decisions = [decide(r) for r in range(world)]
            for all_ in (True, False):
                wanted = all(decisions) if all_ else any(decisions)
                got = strategy.reduce_boolean_decision(decide(rank), all=all_)
                if not isinstance(got, bool) or got != wanted:
                    raise failure(
                        target,
                        "STRAT-13",
                        expected=f"return {wanted} from reduce_boolean_decision(..., "
                        f"all={all_}) with {what} on {world} rank(s)",
                        actual=describe_value(got),
                        hint="all=True is True iff every rank decided True; all=False is True "
                        "iff any rank did.",
                        snippet=_snippet(
                            target,
                            f"print(strategy.reduce_boolean_decision({decide(rank)}, all={all_}))",
                        ),
                    )


# --------------------------------------------------------------------------- STRAT-14, STRAT-15


@check("STRAT-14", "strategy")
def check_strategy_module_state_dict_has_the_unwrapped_keys(target: Target[Strategy]) -> None:
    """module_state_dict must have the plain module's keys and values and load into it."""
    with _set_up(target) as strategy:
        module = strategy.setup_module(probe_module())
        state = strategy.module_state_dict(module)
        plain = probe_module().state_dict()
        repro = _snippet(
            target,
            "module = strategy.setup_module(probe_module())\n"
            "state = strategy.module_state_dict(module)\nprint(list(state))\n"
            "probe_module().load_state_dict({k: v.cpu().float() if v.is_floating_point() "
            "else v.cpu() for k, v in state.items()})",
        )
        if not isinstance(state, dict) or sorted(state) != sorted(plain):
            keys = sorted(state) if isinstance(state, dict) else describe_value(state)
            raise failure(
                target,
                "STRAT-14",
                expected=f"return the unwrapped module's keys {sorted(plain)}",
                actual=f"keys {keys}",
                hint="Unwrap the module (no 'module.' or other wrapper prefix) before "
                "state_dict().",
                snippet=repro,
            )
        rtol = _rtol(strategy.precision)
        for key, value in plain.items():
            got = state[key]
            if not isinstance(got, torch.Tensor) or not _close(got, value, rtol):
                raise failure(
                    target,
                    "STRAT-14",
                    expected=f"return the module's values under {key!r}",
                    actual=f"{show(got)} where {values(value)} was expected",
                    snippet=repro,
                )
        loadable = {
            k: v.detach().to("cpu", plain[k].dtype if v.is_floating_point() else v.dtype)
            for k, v in state.items()
        }
        try:
            probe_module(seed=1).load_state_dict(loadable, strict=True)
        except Exception as error:
            raise failure(
                target,
                "STRAT-14",
                expected="return a state dict that loads into the plain module",
                actual=describe_exception(error),
                snippet=repro,
            ) from error


@check("STRAT-14", "strategy")
def check_strategy_load_module_state_dict_restores_and_checks_keys(
    target: Target[Strategy],
) -> None:
    """load_module_state_dict must load plain keys and refuse missing or unexpected ones."""
    with _set_up(target) as strategy:
        module = strategy.setup_module(probe_module())
        other = probe_module(seed=1).state_dict()
        repro = _snippet(
            target,
            "module = strategy.setup_module(probe_module())\n"
            "state = probe_module(seed=1).state_dict()\n"
            "strategy.load_module_state_dict(module, state)\n"
            "print(strategy.module_state_dict(module))",
        )
        strategy.load_module_state_dict(module, other)
        loaded = strategy.module_state_dict(module)
        rtol = _rtol(strategy.precision)
        for key, value in other.items():
            if key not in loaded or not _close(loaded[key], value, rtol):
                raise failure(
                    target,
                    "STRAT-14",
                    expected=f"load the plain state dict's {key!r} into the set-up module",
                    actual=show(loaded.get(key)),
                    snippet=repro,
                )
        missing = dict(other)
        del missing["out.bias"]
        unexpected = {**other, "extra.weight": torch.zeros(1)}
        for what, state in (("a missing key", missing), ("an unexpected key", unexpected)):
            expect_raises(
                target,
                "STRAT-14",
                ConfigurationError,
                partial(strategy.load_module_state_dict, module, state),
                expected=f"raise ConfigurationError for a state dict with {what} (strict=True)",
                hint="Translate torch's key-mismatch RuntimeError into ConfigurationError.",
                snippet=_snippet(
                    target,
                    "module = strategy.setup_module(probe_module())\n"
                    "state = probe_module().state_dict()\ndel state['out.bias']\n"
                    "strategy.load_module_state_dict(module, state)",
                ),
            )
        try:
            strategy.load_module_state_dict(module, missing, strict=False)
        except Exception as error:
            raise failure(
                target,
                "STRAT-14",
                expected="accept a state dict with a missing key when strict=False",
                actual=describe_exception(error),
                snippet=repro,
            ) from error


@check("STRAT-15", "strategy")
def check_strategy_optimizer_state_round_trips(target: Target[Strategy]) -> None:
    """optimizer_state_dict must hold the full state and load back equal."""
    adam = partial(torch.optim.Adam, lr=1e-2)
    with _set_up(target) as strategy:
        module, optimizer = _train_parts(strategy, optimizer=adam)
        _backward_on_rank_batch(strategy, module)
        strategy.optimizer_step(optimizer)
        saved = strategy.optimizer_state_dict(optimizer)
        repro = _snippet(
            target,
            _TRAIN_LINES.replace(
                "torch.optim.SGD(module.parameters(), lr=0.5)",
                "torch.optim.Adam(module.parameters(), lr=1e-2)",
            )
            + "strategy.optimizer_step(optimizer)\n"
            "state = strategy.optimizer_state_dict(optimizer)\n"
            "other = strategy.setup_module(probe_module())\n"
            "other_opt = strategy.setup_optimizer(torch.optim.Adam(other.parameters(), lr=1e-2))\n"
            "strategy.load_optimizer_state_dict(other_opt, state)\n"
            "print(strategy.optimizer_state_dict(other_opt))",
        )
        state = saved.get("state") if isinstance(saved, dict) else None
        if not isinstance(state, dict) or not state or "param_groups" not in saved:
            raise failure(
                target,
                "STRAT-15",
                expected="return the full optimizer state ('state' with every parameter's "
                "entries, and 'param_groups') after a step",
                actual=describe_value(saved),
                snippet=repro,
            )
        snapshot = copy.deepcopy(saved)
        _, second_optimizer = _train_parts(strategy, optimizer=adam)
        strategy.load_optimizer_state_dict(second_optimizer, snapshot)
        restored = strategy.optimizer_state_dict(second_optimizer)
        differences = checkpoint_differences(saved, restored, check_sharing=False)
        if differences:
            raise failure(
                target,
                "STRAT-15",
                expected="restore an equal optimizer state with load_optimizer_state_dict",
                actual="; ".join(differences[:4]),
                snippet=repro,
            )


# --------------------------------------------------------------------------- STRAT-16, STRAT-17


@check("STRAT-16", "strategy")
def check_strategy_save_checkpoint_writes_a_complete_checkpoint_before_returning(
    target: Target[Strategy],
) -> None:
    """save_checkpoint must return on every rank only after the whole checkpoint is at path."""
    with _set_up(target) as strategy, _shared_directory(target, strategy) as directory:
        path = directory / "nested" / "probe.ckpt"
        checkpoint = _probe_checkpoint()
        strategy.save_checkpoint(checkpoint, path)
        repro = _snippet(
            target,
            "import os\ncheckpoint = {'step': 7, 'weights': torch.ones(2, 3)}\n"
            "strategy.save_checkpoint(checkpoint, 'ckpt/nested/probe.ckpt')\n"
            "print(os.path.exists('ckpt/nested/probe.ckpt'))",
        )
        if not path.exists():
            raise failure(
                target,
                "STRAT-16",
                expected=f"return from save_checkpoint on rank {strategy.global_rank} only "
                "after the checkpoint exists at the path",
                actual="no file at the path after save_checkpoint returned",
                hint="Wait for the write (and for rank 0, with a barrier) before returning.",
                snippet=repro,
            )
        loaded = strategy.checkpoint_io.load_checkpoint(path)
        differences = checkpoint_differences(checkpoint, loaded, check_device=False)
        if differences:
            raise failure(
                target,
                "STRAT-16",
                expected="write the complete checkpoint before returning",
                actual="; ".join(differences[:4]),
                snippet=repro,
            )


@check("STRAT-17", "strategy")
def check_strategy_load_checkpoint_places_tensors_on_the_root_device(
    target: Target[Strategy],
) -> None:
    """load_checkpoint must return the checkpoint with every tensor on root_device."""
    with _set_up(target) as strategy, _shared_directory(target, strategy) as directory:
        path = directory / "probe.ckpt"
        checkpoint = _probe_checkpoint()
        # Written by the checkpoint IO itself, so that a faulty save_checkpoint (STRAT-16)
        # is not blamed on load_checkpoint.
        if strategy.is_global_zero:
            strategy.checkpoint_io.save_checkpoint(checkpoint, path)
        strategy.barrier()
        loaded = strategy.load_checkpoint(path)
        device = strategy.root_device
        repro = _snippet(
            target,
            "strategy.checkpoint_io.save_checkpoint({'weights': torch.ones(2, 3)}, 'probe.ckpt')\n"
            "print(strategy.load_checkpoint('probe.ckpt')['weights'].device, strategy.root_device)",
        )
        placed = [t.device for t in _tensors_in(loaded)]
        if not placed or not all(_same_device(d, device) for d in placed):
            raise failure(
                target,
                "STRAT-17",
                expected=f"load every tensor onto root_device {device}",
                actual=f"tensors on {sorted(set(map(str, placed)))}",
                hint="Pass map_location=root_device to the checkpoint IO.",
                snippet=repro,
            )
        if device.type != "meta":  # meta tensors hold no values to compare
            differences = checkpoint_differences(checkpoint, loaded, check_device=False)
            if differences:
                raise failure(
                    target,
                    "STRAT-17",
                    expected="load back the checkpoint that was saved",
                    actual="; ".join(differences[:4]),
                    snippet=repro,
                )


@check("STRAT-17", "strategy")
def check_strategy_remove_checkpoint_removes_it_for_every_rank(target: Target[Strategy]) -> None:
    """remove_checkpoint must delete the checkpoint before returning, and be idempotent."""
    with _set_up(target) as strategy, _shared_directory(target, strategy) as directory:
        path = directory / "probe.ckpt"
        strategy.save_checkpoint(_probe_checkpoint(), path)
        strategy.remove_checkpoint(path)
        repro = _snippet(
            target,
            "strategy.save_checkpoint({'step': 1}, 'probe.ckpt')\n"
            "strategy.remove_checkpoint('probe.ckpt')\nstrategy.load_checkpoint('probe.ckpt')",
        )
        expect_raises(
            target,
            "STRAT-17",
            CheckpointNotFoundError,
            partial(strategy.load_checkpoint, path),
            expected="raise CheckpointNotFoundError from load_checkpoint after "
            "remove_checkpoint returned",
            snippet=repro,
        )
        try:
            strategy.remove_checkpoint(path)
        except Exception as error:
            raise failure(
                target,
                "STRAT-17",
                expected="accept remove_checkpoint of a path that no longer exists",
                actual=describe_exception(error),
                snippet=repro + "\n    strategy.remove_checkpoint('probe.ckpt')",
            ) from error


# ----------------------------------------------------------------------- SYNC-1, SHARD-1, STEP-1


@check("SYNC-1", "strategy", requires=("backward_sync",))
def check_strategy_no_backward_sync_accumulation_equals_one_large_step(
    target: Target[Strategy],
) -> None:
    """Accumulating K micro-batches under no_backward_sync must equal one step on their union."""
    micro, count = 3, 3
    with _set_up(target) as strategy:
        if not isinstance(strategy, BackwardSyncControl):
            raise failure(
                target,
                "SYNC-1",
                expected="implement trainspec.BackwardSyncControl (declared 'backward_sync')",
                actual=f"{type(strategy).__name__} has no no_backward_sync",
                snippet=_snippet(target, "strategy.no_backward_sync", set_up=False),
            )
        _need_predictable(target, strategy)
        module, optimizer = _train_parts(strategy)
        parameters = _own_parameters(module)
        with strategy.no_backward_sync(module, enabled=False):
            pass  # a no-op context must still be usable
        inputs, targets = probe_batch(strategy.global_rank, size=micro * count)
        for index in range(count):
            part = slice(index * micro, (index + 1) * micro)
            batch = (inputs[part], targets[part])
            if index < count - 1:
                with strategy.no_backward_sync(module):
                    _backward_on_rank_batch(strategy, module, batch, scale=1 / count)
            else:
                _backward_on_rank_batch(strategy, module, batch, scale=1 / count)
        _unscale(target, "SYNC-1", strategy, optimizer)
        batches = [probe_batch(r, size=micro * count) for r in range(strategy.world_size)]
        _gradient_failure(
            target,
            "SYNC-1",
            f"accumulate {count} micro-batches (all but the last under no_backward_sync) into "
            "the gradients of one step on their union",
            _grads(parameters),
            _expected_grads(batches),
            _rtol(strategy.precision) * 2,
        )


@check("SHARD-1", "strategy", requires=("sharded_module",))
def check_strategy_sharded_module_context_builds_modules_that_train_alike(
    target: Target[Strategy],
) -> None:
    """A module built in sharded_module_context must train like one built outside it."""
    with _set_up(target) as strategy:
        if not isinstance(strategy, ShardedModuleContext):
            raise failure(
                target,
                "SHARD-1",
                expected="implement trainspec.ShardedModuleContext (declared 'sharded_module')",
                actual=f"{type(strategy).__name__} has no sharded_module_context",
            )
        _need_predictable(target, strategy)
        with strategy.sharded_module_context():
            built = ProbeNet()
        module = strategy.setup_module(built)
        strategy.load_module_state_dict(module, probe_module().state_dict())
        optimizer = strategy.setup_optimizer(torch.optim.SGD(module.parameters(), lr=_LR))
        _backward_on_rank_batch(strategy, module)
        strategy.optimizer_step(optimizer)
        trained = strategy.module_state_dict(module)
        grads = _expected_grads(_world_batches(strategy))
        names = [name for name, _ in probe_module().named_parameters()]
        start = dict(probe_module().named_parameters())
        rtol = max(_rtol(strategy.precision), 1e-6) * 4
        for name, grad in zip(names, grads, strict=True):
            before = start[name].detach().double()
            update = trained[name].detach().to("cpu", torch.float64) - before
            if not _close(update, -_LR * grad, rtol):
                raise failure(
                    target,
                    "SHARD-1",
                    expected="train a module built in sharded_module_context() like one "
                    "built outside it (one SGD step)",
                    actual=f"{name} moved by {show(update)} instead of {values(-_LR * grad)}",
                    snippet=_snippet(
                        target,
                        "from trainspec.conformance.checks.strategy import ProbeNet\n"
                        "with strategy.sharded_module_context():\n    built = ProbeNet()\n"
                        "module = strategy.setup_module(built)",
                    ),
                )


@check("STEP-1", "strategy", requires=("step_boundary",))
def check_strategy_mark_step_materialises_pending_computation(target: Target[Strategy]) -> None:
    """After mark_step, tensors computed before it must hold their values; repeats are safe."""
    with _set_up(target) as strategy:
        if not isinstance(strategy, StepBoundary):
            raise failure(
                target,
                "STEP-1",
                expected="implement trainspec.StepBoundary (declared 'step_boundary')",
                actual=f"{type(strategy).__name__} has no mark_step",
            )
        values = strategy.batch_to_device(torch.arange(6, dtype=torch.float32))
        result = values * 2 + 1
        repro = _snippet(
            target,
            "t = strategy.batch_to_device(torch.arange(6.0)) * 2 + 1\n"
            "strategy.mark_step()\nstrategy.mark_step()\nprint(t.cpu())",
        )
        try:
            strategy.mark_step()
            strategy.mark_step()
        except Exception as error:
            raise failure(
                target,
                "STEP-1",
                expected="accept mark_step() at any time after setup, repeatedly",
                actual=describe_exception(error),
                snippet=repro,
            ) from error
        want = torch.arange(6, dtype=torch.float64) * 2 + 1
        if not _close(result.cpu(), want, _rtol(strategy.precision)):
            raise failure(
                target,
                "STEP-1",
                expected="keep the values of tensors computed before mark_step()",
                actual=show(result.cpu()),
                snippet=repro,
            )
