"""STRAT-14 ... STRAT-17: state dicts carry no wrapper prefix and round-trip, checkpoints are
written completely before save returns, load onto the root device and are removed for every
rank."""

from __future__ import annotations

import copy
import os
import shutil
import tempfile
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, cast

import torch

from trainspec.conformance._helpers import (
    checkpoint_differences,
    describe_exception,
    describe_value,
    expect_raises,
    failure,
)
from trainspec.conformance.checks.collective import show, values
from trainspec.conformance.checks.strategy._fixtures import (
    _TRAIN_LINES,
    _backward_on_rank_batch,
    _close,
    _complete,
    _rtol,
    _same_device,
    _set_up,
    _snippet,
    _train_parts,
    probe_module,
)
from trainspec.conformance.core import Target, check
from trainspec.distributed_checkpoint_io import CheckpointLayoutControl
from trainspec.errors import CheckpointNotFoundError, ConfigurationError

if TYPE_CHECKING:
    from collections.abc import Iterator

    from trainspec.strategy import Strategy


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


def _is_sharded_layout(strategy: Strategy) -> bool:
    """Whether the strategy declares the sharded checkpoint layout (LAYOUT-1)."""
    return isinstance(strategy, CheckpointLayoutControl) and strategy.checkpoint_layout == "sharded"


def _tensors_in(value: object) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, dict):
        return [t for item in value.values() for t in _tensors_in(item)]
    if isinstance(value, (list, tuple)):
        return [t for item in value for t in _tensors_in(item)]
    return []


# --------------------------------------------------------------------------- STRAT-14, STRAT-15


@check("STRAT-14", "strategy")
def check_strategy_module_state_dict_has_the_unwrapped_keys(target: Target[Strategy]) -> None:
    """module_state_dict must have the plain module's keys and values and load into it."""
    with _set_up(target) as strategy:
        module = strategy.setup_module(probe_module())
        state = cast("dict[str, torch.Tensor]", _complete(strategy.module_state_dict(module)))
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
        loaded = cast("dict[str, torch.Tensor]", _complete(strategy.module_state_dict(module)))
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
        differences = checkpoint_differences(
            cast("dict[str, object]", _complete(saved)),
            cast("dict[str, object]", _complete(restored)),
            check_sharing=False,
        )
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
        # is not blamed on load_checkpoint; a sharded layout's IO saves on every rank.
        if strategy.is_global_zero or _is_sharded_layout(strategy):
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
