"""FSDP and distributed-checkpoint scenarios for the test world (see ``conftest.py``).

Run with ``world.run(name, ..., scenarios=FSDP_SCENARIOS)``. Each scenario sets up its own
strategy from the rank's environment, asserts what a rank can check alone, tears down, and
returns plain data for the test process to compare across ranks.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import torch
from torch.distributed.tensor import DTensor

from trainspec import (
    CheckpointCorruptedError,
    CheckpointError,
    CheckpointNotFoundError,
    CollectiveError,
    ConfigurationError,
)
from trainspec.conformance.fakes import SingleProcessEnvironment
from trainspec.reference.checkpoint_io.distributed import DCPCheckpointIO
from trainspec.reference.precisions import BFloat16MixedPrecision, BFloat16Precision
from trainspec.reference.strategies.ddp import DDPStrategy
from trainspec.reference.strategies.fsdp import FSDPStrategy
from trainspec.reference.strategies.single_device import SingleDeviceStrategy

if TYPE_CHECKING:
    from trainspec.precision import Precision

CPU = torch.device("cpu")
LR = 0.1
WIDTH = 8


def world() -> int:
    return int(os.environ["WORLD_SIZE"])


def make_model(seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(
        torch.nn.Linear(4, WIDTH), torch.nn.Tanh(), torch.nn.Linear(WIDTH, 3)
    )


def make_data(steps: int, samples: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(1)
    return (
        torch.randn(steps, samples, 4, generator=generator),
        torch.randn(steps, samples, 3, generator=generator),
    )


def make_optimizer(name: str, parameters: Any) -> torch.optim.Optimizer:
    if name == "adam":
        return torch.optim.Adam(parameters, lr=0.01)
    return torch.optim.SGD(parameters, lr=LR, momentum=0.9)


def precision_of(flag: str) -> Precision | None:
    return {
        "32-true": None,
        "bf16-mixed": BFloat16MixedPrecision(),
        "bf16-true": BFloat16Precision(),
    }[flag]


def fsdp(layout: str = "sharded", flag: str = "32-true", **options: Any) -> FSDPStrategy:
    strategy = FSDPStrategy(
        parallel_devices=[CPU] * world(),
        checkpoint_layout=layout,  # type: ignore[arg-type]
        precision=precision_of(flag),
        **options,
    )
    strategy.setup_environment()
    return strategy


def full(state: dict[str, Any]) -> dict[str, torch.Tensor]:
    return {
        key: (value.full_tensor() if isinstance(value, DTensor) else value).detach().clone()
        for key, value in state.items()
    }


def train(strategy: Any, module: Any, optimizer: Any, steps: range, batch: int) -> None:
    rank, size = strategy.global_rank, strategy.world_size
    inputs, targets = make_data(steps.stop, batch * size)
    mine = slice(rank * batch, (rank + 1) * batch)
    for step in steps:
        optimizer.zero_grad()
        with strategy.forward_context():
            output = module(strategy.batch_to_device(inputs[step, mine]))
            loss = torch.nn.functional.mse_loss(output.float(), targets[step, mine])
        strategy.backward(loss, module)
        strategy.optimizer_step(optimizer)


def reference(steps: int, samples: int, optimizer: str = "sgd") -> dict[str, torch.Tensor]:
    model = make_model()
    opt = make_optimizer(optimizer, model.parameters())
    inputs, targets = make_data(steps, samples)
    for step in range(steps):
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(inputs[step]), targets[step]).backward()
        opt.step()
    return {key: value.detach().clone() for key, value in model.state_dict().items()}


# -- training parity (E2E-1) ----------------------------------------------------------------------


def fsdp_trains_like_one_process(
    steps: int, batch: int, layout: str, flag: str, optimizer: str
) -> dict[str, Any]:
    strategy = fsdp(layout, flag)
    try:
        module = strategy.setup_module(make_model())
        weight = module[0].weight
        assert isinstance(weight, DTensor), type(weight)
        assert weight.to_local().numel() < weight.numel(), "parameters are not sharded"
        opt = strategy.setup_optimizer(make_optimizer(optimizer, module.parameters()))
        train(strategy, module, opt, range(steps), batch)
        trained = full(strategy.module_state_dict(module))
        expected = reference(steps, batch * strategy.world_size, optimizer)
        assert sorted(trained) == sorted(expected), sorted(trained)
        difference = max((trained[k].float() - expected[k]).abs().max().item() for k in expected)
        return {"keys": sorted(trained), "difference": difference}
    finally:
        strategy.teardown()


# -- resume (E2E-2) -------------------------------------------------------------------------------


def fsdp_resume_is_exact(directory: str, layout: str) -> dict[str, Any]:
    path = os.path.join(directory, f"resume-{layout}")
    strategy = fsdp(layout)
    try:
        module = strategy.setup_module(make_model())
        opt = make_optimizer("adam", module.parameters())
        train(strategy, module, opt, range(2), 3)
        strategy.save_checkpoint(
            {
                "module": strategy.module_state_dict(module),
                "optimizer": strategy.optimizer_state_dict(opt),
                "step": 2,
            },
            path,
        )
        train(strategy, module, opt, range(2, 4), 3)
        uninterrupted = full(strategy.module_state_dict(module))
    finally:
        strategy.teardown()
    resumed = fsdp(layout)
    try:
        module = resumed.setup_module(make_model(seed=5))
        opt = make_optimizer("adam", module.parameters())
        loaded = resumed.load_checkpoint(path)
        resumed.load_module_state_dict(module, loaded["module"])
        resumed.load_optimizer_state_dict(opt, loaded["optimizer"])
        assert loaded["step"] == 2
        train(resumed, module, opt, range(2, 4), 3)
        after = full(resumed.module_state_dict(module))
        equal = all(torch.equal(after[k], uninterrupted[k]) for k in uninterrupted)
        return {"equal": equal, "files": sorted(os.listdir(path)) if os.path.isdir(path) else []}
    finally:
        resumed.teardown()


# -- checkpoints move between strategies and numbers of ranks (E2E-3, DCKPT-5) --------------------


def checkpoints_move_between_fsdp_ddp_and_single_device(directory: str) -> dict[str, Any]:
    rank = int(os.environ["RANK"])
    sharded_path = os.path.join(directory, "fsdp-sharded")
    full_path = os.path.join(directory, "fsdp-full.ckpt")
    strategy = fsdp("sharded")
    try:
        module = strategy.setup_module(make_model())
        opt = make_optimizer("adam", module.parameters())
        train(strategy, module, opt, range(2), 3)
        expected = full(strategy.module_state_dict(module))
        strategy.save_checkpoint(
            {
                "module": strategy.module_state_dict(module),
                "optimizer": strategy.optimizer_state_dict(opt),
            },
            sharded_path,
        )
        expected_optimizer = full(strategy.optimizer_state_dict(opt)["state"][0])
    finally:
        strategy.teardown()
    results: dict[str, Any] = {}

    # 2 -> 1: one process, not set up as a world, loads the sharded checkpoint.
    single = SingleDeviceStrategy(
        cluster_environment=SingleProcessEnvironment(), checkpoint_io=DCPCheckpointIO()
    )
    single.setup_environment()
    try:
        other = single.setup_module(make_model(seed=9))
        other_opt = make_optimizer("adam", other.parameters())
        loaded = single.load_checkpoint(sharded_path)
        single.load_module_state_dict(other, loaded["module"])
        single.load_optimizer_state_dict(other_opt, loaded["optimizer"])
        state = single.module_state_dict(other)
        results["single_from_fsdp"] = all(torch.equal(state[k], expected[k]) for k in expected)
        moment = other_opt.state_dict()["state"][0]
        results["optimizer_from_fsdp"] = all(
            torch.equal(moment[k], expected_optimizer[k]) for k in ("exp_avg", "exp_avg_sq")
        )
        # 1 -> 2: rank 0 alone writes a sharded checkpoint with an unbound IO.
        one_rank_path = os.path.join(directory, "single-dcp")
        if rank == 0:
            single.save_checkpoint(
                {
                    "module": single.module_state_dict(other),
                    "optimizer": single.optimizer_state_dict(other_opt),
                },
                one_rank_path,
            )
    finally:
        single.teardown()

    ddp = DDPStrategy(parallel_devices=[CPU] * world())
    ddp.setup_environment()
    try:
        ddp.barrier()  # rank 0's one-rank save is complete
        replica = ddp.setup_module(make_model(seed=3))
        ddp_opt = make_optimizer("adam", replica.parameters())
        # DDP reads the sharded checkpoint through a DCP reader on every rank.
        loaded = DCPCheckpointIO().load_checkpoint(sharded_path)
        ddp.load_module_state_dict(replica, loaded["module"])
        ddp.load_optimizer_state_dict(ddp_opt, loaded["optimizer"])
        state = ddp.module_state_dict(replica)
        results["ddp_from_fsdp"] = all(torch.equal(state[k], expected[k]) for k in expected)
        train(ddp, replica, ddp_opt, range(2, 3), 3)
        ddp_state = {k: v.clone() for k, v in ddp.module_state_dict(replica).items()}
        ddp.save_checkpoint(
            {"module": ddp_state, "optimizer": ddp.optimizer_state_dict(ddp_opt)}, full_path
        )
    finally:
        ddp.teardown()

    back = fsdp("full")
    try:
        module = back.setup_module(make_model(seed=4))
        opt = make_optimizer("adam", module.parameters())
        loaded = back.load_checkpoint(full_path)
        back.load_module_state_dict(module, loaded["module"])
        back.load_optimizer_state_dict(opt, loaded["optimizer"])
        state = back.module_state_dict(module)
        results["fsdp_full_from_ddp"] = all(
            not isinstance(state[k], DTensor) and torch.equal(state[k], ddp_state[k])
            for k in ddp_state
        )
        optimizer_state = back.optimizer_state_dict(opt)["state"][0]
        results["full_layout_optimizer_is_complete"] = (
            not isinstance(optimizer_state["exp_avg"], DTensor)
            and optimizer_state["exp_avg"].shape == module[0].weight.shape
        )
    finally:
        back.teardown()

    sharded = fsdp("sharded")
    try:
        module = sharded.setup_module(make_model(seed=6))
        opt = make_optimizer("adam", module.parameters())
        loaded = sharded.load_checkpoint(one_rank_path)
        sharded.load_module_state_dict(module, loaded["module"])
        sharded.load_optimizer_state_dict(opt, loaded["optimizer"])
        state = full(sharded.module_state_dict(module))
        results["fsdp_from_one_rank"] = all(torch.equal(state[k], expected[k]) for k in expected)
    finally:
        sharded.teardown()
    return results


# -- clipping (STRAT-11) and accumulation (SYNC-1) ------------------------------------------------


def fsdp_clip_returns_the_global_norm(max_norm: float) -> dict[str, Any]:
    strategy = fsdp()
    try:
        rank, size = strategy.global_rank, strategy.world_size
        module = strategy.setup_module(make_model())
        opt = make_optimizer("sgd", module.parameters())
        inputs, targets = make_data(1, 4 * size)
        mine = slice(rank * 4, (rank + 1) * 4)
        loss = torch.nn.functional.mse_loss(module(inputs[0, mine]), targets[0, mine])
        strategy.backward(loss, module)
        norm = strategy.clip_gradients_norm(module, opt, max_norm)
        plain = make_model()
        torch.nn.functional.mse_loss(plain(inputs[0]), targets[0]).backward()
        expected = torch.nn.utils.get_total_norm([p.grad for p in plain.parameters()])
        clipped = torch.nn.utils.get_total_norm(
            [p.grad.full_tensor() for p in module.parameters()]  # type: ignore[union-attr]
        )
        return {
            "norm": float(norm),
            "expected": float(expected),
            "clipped": float(clipped),
            "is_dtensor": isinstance(norm, DTensor),
        }
    finally:
        strategy.teardown()


def fsdp_no_backward_sync_accumulates_like_one_step() -> dict[str, Any]:
    strategy = fsdp()
    try:
        rank, size = strategy.global_rank, strategy.world_size
        module = strategy.setup_module(make_model())
        inputs, targets = make_data(2, 4 * size)
        mine = slice(rank * 4, (rank + 1) * 4)
        with strategy.no_backward_sync(module):
            loss = torch.nn.functional.mse_loss(module(inputs[0, mine]), targets[0, mine])
            strategy.backward(loss, module)
        loss = torch.nn.functional.mse_loss(module(inputs[1, mine]), targets[1, mine])
        strategy.backward(loss, module)
        grads = {n: p.grad.full_tensor() for n, p in module.named_parameters()}  # type: ignore[union-attr]
        plain = make_model()
        for step in range(2):
            for r in range(size):
                part = slice(r * 4, (r + 1) * 4)
                loss = torch.nn.functional.mse_loss(plain(inputs[step, part]), targets[step, part])
                (loss / size).backward()
        difference = max(
            (grads[n] - p.grad).abs().max().item()  # type: ignore[operator]
            for n, p in plain.named_parameters()
        )
        return {"difference": difference}
    finally:
        strategy.teardown()


# -- sharded construction (SHARD-1) ---------------------------------------------------------------


def sharded_context_trains_alike_and_never_holds_the_whole_module() -> dict[str, Any]:
    from trainspec.conformance.distributed.checks.sharded import largest_parameter_allocation

    strategy = fsdp()
    try:
        with largest_parameter_allocation() as peak:
            with strategy.sharded_module_context():
                built = make_model()
            assert all(p.is_meta for p in built.parameters())
            module = strategy.setup_module(built)
        total = sum(p.numel() * p.element_size() for p in make_model().parameters())
        outside = strategy.setup_module(make_model())
        initial = full(strategy.module_state_dict(outside))
        strategy.load_module_state_dict(module, initial)
        opt_in = make_optimizer("sgd", module.parameters())
        opt_out = make_optimizer("sgd", outside.parameters())
        train(strategy, module, opt_in, range(2), 3)
        train(strategy, outside, opt_out, range(2), 3)
        a, b = full(strategy.module_state_dict(module)), full(strategy.module_state_dict(outside))
        return {
            "peak": peak.bytes,
            "total": total,
            "difference": max((a[k] - b[k]).abs().max().item() for k in a),
        }
    finally:
        strategy.teardown()


# -- the distributed checkpoint IO on two ranks (DCKPT-*) -----------------------------------------


def dcp_failure_on_one_rank_reaches_every_rank(directory: str) -> dict[str, Any]:
    path = os.path.join(directory, "failing")
    strategy = fsdp()
    try:
        io = strategy.checkpoint_io
        io.save_checkpoint({"x": torch.ones(2)}, path)
        bad: dict[str, Any] = {"x": torch.zeros(2)}
        if strategy.global_rank == 1:
            bad["oops"] = object()
        try:
            io.save_checkpoint(bad, path)
            raised = "nothing"
        except TypeError:
            raised = "TypeError"
        except (CheckpointError, CollectiveError) as error:
            raised = type(error).__name__
        kept = io.load_checkpoint(path)["x"].tolist()
        return {"raised": raised, "kept": kept}
    finally:
        strategy.teardown()


def dcp_interrupt_on_one_rank(directory: str) -> dict[str, Any]:
    """Ctrl-C on rank 0 while DCP writes (a replicated tensor: rank 0 writes it, CKPT-14):
    rank 0 raises the interrupt itself, rank 1 a CheckpointWriteError naming the failed rank;
    both keep the old save."""
    path = os.path.join(directory, "interrupted")
    strategy = fsdp()
    try:
        io = strategy.checkpoint_io
        io.save_checkpoint({"x": torch.ones(2)}, path)
        real_save = torch.save

        def interrupted_save(*args: Any, **kwargs: Any) -> None:
            raise KeyboardInterrupt

        if strategy.global_rank == 0:
            torch.save = interrupted_save  # DCP hands the tensors it writes to torch.save
        try:
            io.save_checkpoint({"x": torch.zeros(2)}, path)
            raised = "nothing"
        except KeyboardInterrupt:
            raised = "KeyboardInterrupt"
        except CheckpointError as error:
            raised = f"{type(error).__name__}: {error}"
        finally:
            torch.save = real_save
        kept = io.load_checkpoint(path)["x"].tolist()
        return {"raised": raised, "kept": kept}
    finally:
        strategy.teardown()


def dcp_damaged_checkpoints_raise_checkpoint_errors(directory: str) -> dict[str, Any]:
    path = os.path.join(directory, "damaged")
    strategy = fsdp()
    outcomes: list[str] = []
    try:
        module = strategy.setup_module(make_model())
        strategy.save_checkpoint({"module": strategy.module_state_dict(module)}, path)
        strategy.barrier()
        files = sorted(
            os.path.join(root, name)
            for root, _, names in os.walk(path)
            for name in names
            if not name.endswith(".tmp")
        )
        io = DCPCheckpointIO()
        for file in files:
            with open(file, "rb") as handle:
                original = handle.read()
            for damage in ("delete", "truncate", "garbage"):
                strategy.barrier()
                if strategy.global_rank == 0:
                    if damage == "delete":
                        os.unlink(file)
                    else:
                        data = (
                            original[: len(original) // 2]
                            if damage == "truncate"
                            else (os.urandom(max(len(original), 16)))
                        )
                        with open(file, "wb") as handle:
                            handle.write(data)
                strategy.barrier()
                try:
                    io.load_checkpoint(path)
                    outcomes.append(f"{os.path.basename(file)} {damage}: loaded")
                except CheckpointCorruptedError as error:
                    assert str(path) in str(error), error
                    outcomes.append("corrupted")
                except CheckpointNotFoundError:
                    outcomes.append("not found")
                strategy.barrier()
                if strategy.global_rank == 0:
                    with open(file, "wb") as handle:
                        handle.write(original)
                strategy.barrier()
        return {"files": len(files), "outcomes": outcomes}
    finally:
        strategy.teardown()


def dcp_remove_is_collective_and_idempotent(directory: str) -> dict[str, Any]:
    path = os.path.join(directory, "removed")
    other = os.path.join(directory, "kept")
    strategy = fsdp()
    try:
        strategy.save_checkpoint({"x": torch.ones(1)}, path)
        strategy.save_checkpoint({"x": torch.ones(1)}, other)
        strategy.remove_checkpoint(path)
        gone = not os.path.exists(path)
        strategy.remove_checkpoint(path)
        try:
            strategy.load_checkpoint(path)
            missing = False
        except CheckpointNotFoundError:
            missing = True
        kept = strategy.load_checkpoint(other)["x"].tolist()
        return {"gone": gone, "missing": missing, "kept": kept}
    finally:
        strategy.teardown()


def fsdp_strict_loading_names_keys() -> dict[str, Any]:
    strategy = fsdp()
    try:
        module = strategy.setup_module(make_model())
        state = full(strategy.module_state_dict(module))
        state["extra"] = torch.zeros(1)
        try:
            strategy.load_module_state_dict(module, state)
            strict = "nothing"
        except ConfigurationError as error:
            strict = "extra" in str(error)
        strategy.load_module_state_dict(module, state, strict=False)
        return {"strict_names_key": strict}
    finally:
        strategy.teardown()


def fsdp_sharded_state_dicts_round_trip_in_memory() -> dict[str, Any]:
    strategy = fsdp()
    try:
        module = strategy.setup_module(make_model())
        opt = make_optimizer("adam", module.parameters())
        train(strategy, module, opt, range(1), 3)
        saved = strategy.optimizer_state_dict(opt)
        other = strategy.setup_module(make_model(seed=2))
        other_opt = make_optimizer("adam", other.parameters())
        strategy.load_module_state_dict(other, strategy.module_state_dict(module))
        strategy.load_optimizer_state_dict(other_opt, saved)
        again = strategy.optimizer_state_dict(other_opt)
        equal = all(
            torch.equal(full(again["state"][i])[k], full(saved["state"][i])[k])
            for i in saved["state"]
            for k in saved["state"][i]
        )
        return {"equal": equal}
    finally:
        strategy.teardown()
