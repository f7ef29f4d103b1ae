"""STRAT-5 ... STRAT-7: set-up modules compute the same function on the root device, the
strategy contexts apply the precision and restore state, and batches keep their structure."""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, NamedTuple

import torch

from trainspec.conformance._helpers import checkpoint_differences, describe_value, failure
from trainspec.conformance.checks.collective import show, tensors_match, values
from trainspec.conformance.checks.strategy._fixtures import (
    _close,
    _rtol,
    _same_device,
    _set_up,
    _snippet,
    _train_parts,
    probe_batch,
    probe_module,
)
from trainspec.conformance.core import Target, check

if TYPE_CHECKING:
    from trainspec.strategy import Strategy

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
