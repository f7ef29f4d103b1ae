"""Scenarios that run on every rank of the test world (see ``conftest.py``).

Each scenario sets up what it needs from the rank's environment variables (``RANK``,
``WORLD_SIZE``, ``MASTER_PORT`` fresh for the call), asserts what a rank can check alone,
tears down, and returns plain data for the test process to compare across ranks.
Contributions are functions of the rank, so every expected value is computed directly.
"""

from __future__ import annotations

import os
import pickle
import threading
import time
from contextlib import contextmanager
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import torch
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

from trainspec import (
    REDUCE_OPS,
    CollectiveError,
    CollectiveTimeoutError,
    ConfigurationError,
    LifecycleError,
    PeerFailureError,
)
from trainspec.conformance.fakes import SingleProcessEnvironment
from trainspec.reference.cluster_environments import LocalEnvironment
from trainspec.reference.collectives.torch_dist import TorchCollective
from trainspec.reference.launchers import SubprocessScriptLauncher
from trainspec.reference.strategies.ddp import DDPStrategy
from trainspec.reference.strategies.single_device import SingleDeviceStrategy

if TYPE_CHECKING:
    from collections.abc import Iterator

CPU = torch.device("cpu")
LR = 0.1


def rank_and_world() -> tuple[int, int]:
    return int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])


@contextmanager
def collective(timeout: timedelta = timedelta(seconds=60)) -> Iterator[TorchCollective]:
    group = TorchCollective(timeout=timeout)
    group.setup(LocalEnvironment(), CPU)
    try:
        yield group
    finally:
        group.teardown()


def contribution(rank: int, dtype: torch.dtype = torch.float32, index: int = 0) -> torch.Tensor:
    base = torch.tensor([[1, -2, 3], [-4, 5, 0]])
    return (base * (rank + 1) + 10 * index).to(dtype)


def _expect(error: type[BaseException], call: Any) -> None:
    try:
        call()
    except error:
        return
    raise AssertionError(f"expected {error.__name__} from {call}")


# -- collectives ------------------------------------------------------------------------------


def all_reduce_matches_direct_computation() -> int:
    checks = 0
    with collective() as group:
        rank, world = group.rank, group.world_size
        for dtype in (torch.float32, torch.float64, torch.int64):
            everyone = torch.stack([contribution(r, dtype) for r in range(world)])
            mine = contribution(rank, dtype)
            pristine = mine.clone()
            expected = {
                "sum": everyone.sum(0),
                "mean": torch.true_divide(everyone.sum(0), world),
                "min": everyone.min(0).values,
                "max": everyone.max(0).values,
                "product": everyone.prod(0),
            }
            for op in REDUCE_OPS:
                got = group.all_reduce(mine, op)
                assert got.dtype == expected[op].dtype, (op, dtype, got.dtype)
                assert torch.allclose(got, expected[op]), (op, dtype, got, expected[op])
                assert got.data_ptr() != mine.data_ptr()
                assert torch.equal(mine, pristine), "all_reduce modified its input"
                checks += 1
            assert torch.allclose(group.all_reduce(mine), expected["mean"])  # default is mean
            assert group.all_reduce(mine, "mean").is_floating_point()
        flags = torch.tensor([rank % 2 == 0, True, False])
        assert torch.allclose(
            group.all_reduce(flags, "mean"),
            torch.stack([torch.tensor([r % 2 == 0, True, False]) for r in range(world)])
            .sum(0)
            .div(world),
        )
        _expect(ConfigurationError, lambda: group.all_reduce(mine, "avg"))  # type: ignore[arg-type]
    return checks


def tensor_collectives_match_direct_computation() -> dict[str, int]:
    with collective() as group:
        rank, world = group.rank, group.world_size
        mine = contribution(rank)
        gathered = group.all_gather(mine)
        assert [t.tolist() for t in gathered] == [contribution(r).tolist() for r in range(world)]
        for src in range(world):
            assert torch.equal(group.broadcast(mine, src), contribution(src))
            assert torch.equal(mine, contribution(rank)), "broadcast modified its input"
        for dst in range(world):
            result = group.gather(mine, dst)
            if rank == dst:
                assert result is not None
                assert [t.tolist() for t in result] == [
                    contribution(r).tolist() for r in range(world)
                ]
            else:
                assert result is None
        for src in range(world):
            listed = [contribution(src, index=i) for i in range(world)] if rank == src else None
            assert torch.equal(group.scatter(listed, src), contribution(src, index=rank))
        # Shares of different shapes per index, equal across ranks.
        shaped = [torch.full((i + 1, 2), float(rank + 1) * (i + 1)) for i in range(world)]
        total = sum(range(1, world + 1))
        for op, expected in (
            ("sum", float(total) * (rank + 1)),
            ("mean", float(total) * (rank + 1) / world),
            ("max", float(world) * (rank + 1)),
            ("min", float(rank + 1)),
        ):
            got = group.reduce_scatter(shaped, op)  # type: ignore[arg-type]
            assert got.shape == (rank + 1, 2), got.shape
            assert torch.allclose(got, torch.full((rank + 1, 2), expected)), (op, got)
        assert torch.equal(
            group.reduce_scatter([contribution(rank, torch.int64, i) for i in range(world)], "sum"),
            sum(contribution(r, torch.int64, rank) for r in range(world)),
        )
        exchanged = group.all_to_all([contribution(rank, index=i) for i in range(world)])
        assert [t.tolist() for t in exchanged] == [
            contribution(r, index=rank).tolist() for r in range(world)
        ]
        group.barrier()
        group.barrier(timeout=timedelta(seconds=30))
        # Input checks fail on the calling rank before anything is sent.
        _expect(ConfigurationError, lambda: group.broadcast(mine, world))
        _expect(ConfigurationError, lambda: group.gather(mine, -1))
        _expect(ConfigurationError, lambda: group.scatter([mine] * (world + 1), rank))
        _expect(ConfigurationError, lambda: group.reduce_scatter([mine], "sum"))
        _expect(ConfigurationError, lambda: group.all_reduce(mine, timeout=timedelta(0)))
    return {"rank": rank, "world": world}


def object_collectives_deliver_copies() -> list[object]:
    with collective() as group:
        rank, world = group.rank, group.world_size
        mine = {"rank": rank, "items": [rank, "x", None, 2.5]}
        for src in range(world):
            got = group.broadcast_object(mine, src)
            assert got == {"rank": src, "items": [src, "x", None, 2.5]}
            assert got is not mine and got["items"] is not mine["items"]
        everyone = group.all_gather_object(mine)
        assert everyone == [{"rank": r, "items": [r, "x", None, 2.5]} for r in range(world)]
        assert all(item is not mine for item in everyone)
        # An unpicklable object fails on its own rank (here each rank is its own source).
        _expect(ConfigurationError, lambda: group.broadcast_object(threading.Lock(), rank))
        return everyone


def lifecycle_refuses_calls_outside_setup_and_sets_up_again() -> bool:
    group = TorchCollective(timeout=timedelta(seconds=60))
    assert group.is_initialized is False
    _expect(LifecycleError, lambda: group.all_reduce(torch.ones(1)))
    _expect(LifecycleError, lambda: group.rank)
    group.setup(LocalEnvironment(), CPU)
    assert group.is_initialized and group.rank == rank_and_world()[0]
    assert group.all_reduce(torch.ones(1), "sum").item() == group.world_size
    group.teardown()
    group.teardown()
    assert group.is_initialized is False
    _expect(LifecycleError, lambda: group.barrier())
    group.setup(LocalEnvironment(), CPU)  # the same port again
    group.barrier()
    group.teardown()
    return True


def adopts_an_existing_default_group() -> bool:
    import torch.distributed as dist

    rank, world = rank_and_world()
    dist.init_process_group("gloo", init_method="env://", rank=rank, world_size=world)
    try:
        group = TorchCollective(timeout=timedelta(seconds=60))
        group.setup(LocalEnvironment(), CPU)
        assert group.all_reduce(torch.ones(1), "sum").item() == world
        group.teardown()
        assert dist.is_initialized(), "teardown destroyed a group it did not create"
        dist.barrier()
    finally:
        dist.destroy_process_group()
    return True


def timeout_raises_and_tears_the_group_down(seconds: float, operation: str) -> dict[str, object]:
    group = TorchCollective(timeout=timedelta(seconds=60))
    group.setup(LocalEnvironment(), CPU)
    group.barrier()
    limit = timedelta(seconds=seconds)
    if group.rank == group.world_size - 1:
        # The absent rank: it joins nothing until the others gave up and left.
        time.sleep(seconds * 2 + 2)
        try:
            group.barrier(timeout=timedelta(seconds=20))
            outcome = "no error"
        except CollectiveError as error:
            outcome = type(error).__name__
        return {"late_rank_error": outcome, "initialized": group.is_initialized}
    started = time.monotonic()
    try:
        if operation == "all_gather_object":
            group.all_gather_object({"rank": group.rank}, timeout=limit)
        else:
            group.all_reduce(torch.ones(3), timeout=limit)
        raised = "nothing"
    except CollectiveTimeoutError:
        raised = "CollectiveTimeoutError"
    waited = time.monotonic() - started
    initialized = group.is_initialized
    try:
        group.barrier()
        after = "nothing"
    except LifecycleError:
        after = "LifecycleError"
    group.teardown()  # idempotent after the group was torn down
    return {"raised": raised, "waited": waited, "initialized": initialized, "after": after}


def peer_that_leaves_makes_the_others_raise() -> str:
    group = TorchCollective(timeout=timedelta(seconds=60))
    group.setup(LocalEnvironment(), CPU)
    group.barrier()
    if group.rank == group.world_size - 1:
        group.teardown()
        return "left"
    time.sleep(1.0)
    try:
        group.barrier(timeout=timedelta(seconds=30))
        outcome = "nothing"
    except PeerFailureError:
        outcome = "PeerFailureError"
    except CollectiveError as error:
        outcome = type(error).__name__
    assert group.is_initialized is False
    group.teardown()
    return outcome


# -- DDP ---------------------------------------------------------------------------------------


def make_model(seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))


def make_data(steps: int, samples: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(1)
    return (
        torch.randn(steps, samples, 4, generator=generator),
        torch.randn(steps, samples, 2, generator=generator),
    )


def train_single_process(steps: int, samples: int) -> dict[str, torch.Tensor]:
    """Plain PyTorch on the whole batch: the ground truth."""
    model = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    inputs, targets = make_data(steps, samples)
    for step in range(steps):
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(inputs[step]), targets[step]).backward()
        optimizer.step()
    return {key: value.detach().clone() for key, value in model.state_dict().items()}


def ddp_strategy(**options: Any) -> DDPStrategy:
    _, world = rank_and_world()
    strategy = DDPStrategy(parallel_devices=[CPU] * world, **options)
    strategy.setup_environment()
    return strategy


def ddp_trains_like_one_process_on_the_combined_batch(steps: int, batch: int) -> dict[str, Any]:
    strategy = ddp_strategy()
    try:
        rank, world = strategy.global_rank, strategy.world_size
        assert isinstance(strategy.launcher, SubprocessScriptLauncher)
        assert strategy.is_global_zero == (rank == 0) and strategy.root_device == CPU
        module = strategy.setup_module(make_model())
        optimizer = strategy.setup_optimizer(torch.optim.SGD(module.parameters(), lr=LR))
        initial = {k: v.clone() for k, v in strategy.module_state_dict(module).items()}
        inputs, targets = make_data(steps, batch * world)
        mine = slice(rank * batch, (rank + 1) * batch)
        for step in range(steps):
            optimizer.zero_grad()
            with strategy.forward_context():
                output = module(strategy.batch_to_device(inputs[step, mine]))
            loss = torch.nn.functional.mse_loss(output, targets[step, mine])
            strategy.backward(loss, module)
            strategy.optimizer_step(optimizer)
        trained = strategy.module_state_dict(module)
        expected = train_single_process(steps, batch * world)
        assert sorted(trained) == sorted(expected), sorted(trained)
        assert any(not torch.equal(initial[k], trained[k]) for k in trained), "nothing trained"
        difference = max((trained[k] - expected[k]).abs().max().item() for k in expected)
        assert difference < 1e-5, difference
        return {"keys": sorted(trained), "difference": difference}
    finally:
        strategy.teardown()


def ddp_checkpoint_moves_to_single_device_and_back(directory: str) -> dict[str, Any]:
    strategy = ddp_strategy()
    single = SingleDeviceStrategy(cluster_environment=SingleProcessEnvironment())
    try:
        rank = strategy.global_rank
        module = strategy.setup_module(make_model())
        optimizer = strategy.setup_optimizer(
            torch.optim.SGD(module.parameters(), lr=LR, momentum=0.9)
        )
        inputs, targets = make_data(1, 4)
        strategy.backward(torch.nn.functional.mse_loss(module(inputs[0]), targets[0]), module)
        strategy.optimizer_step(optimizer)
        path = os.path.join(directory, "ddp.ckpt")
        checkpoint = {
            "module": strategy.module_state_dict(module),
            "optimizer": strategy.optimizer_state_dict(optimizer),
            "step": 1,
        }
        strategy.save_checkpoint(checkpoint, path)
        assert os.path.exists(path), "save_checkpoint returned before the file existed"
        saved = {key: value.clone() for key, value in checkpoint["module"].items()}
        saved_keys = sorted(saved)
        assert not any(key.startswith("module.") for key in saved_keys), saved_keys

        # Into a single-device strategy: a module that starts out different.
        single.setup_environment()
        other = single.setup_module(make_model(seed=123))
        assert any(not torch.equal(other.state_dict()[k], saved[k]) for k in saved_keys)
        loaded = single.load_checkpoint(path)
        single.load_module_state_dict(other, loaded["module"])
        other_optimizer = torch.optim.SGD(other.parameters(), lr=LR, momentum=0.9)
        single.load_optimizer_state_dict(other_optimizer, loaded["optimizer"])
        for key in saved_keys:
            assert torch.equal(other.state_dict()[key], saved[key]), key

        # One more single-device step, then back into DDP.
        other_optimizer.zero_grad()
        single.backward(torch.nn.functional.mse_loss(other(inputs[0]), targets[0]), other)
        single.optimizer_step(other_optimizer)
        back_path = os.path.join(directory, f"single-{rank}.ckpt")
        single.save_checkpoint({"module": single.module_state_dict(other)}, back_path)
        reloaded = strategy.load_checkpoint(back_path)
        strategy.load_module_state_dict(module, reloaded["module"])
        after = strategy.module_state_dict(module)
        for key in saved_keys:
            assert torch.equal(after[key], other.state_dict()[key]), key
            assert not torch.equal(after[key], saved[key]), key
        _expect(
            ConfigurationError,
            lambda: strategy.load_module_state_dict(
                module, {"module." + k: v for k, v in reloaded["module"].items()}
            ),
        )
        return {"keys": saved_keys, "step": loaded["step"]}
    finally:
        single.teardown()
        strategy.teardown()


def process_dataloader_shares(
    samples: int, batch_size: int, shuffle: bool, drop_last: bool
) -> dict[str, Any]:
    strategy = ddp_strategy(sampler_seed=7)
    try:
        loader = DataLoader(
            TensorDataset(torch.arange(samples)),
            batch_size=batch_size,
            shuffle=shuffle,
            drop_last=drop_last,
        )
        processed = strategy.process_dataloader(loader)
        sampler = processed.sampler
        assert isinstance(sampler, DistributedSampler)
        assert sampler.shuffle == shuffle and sampler.seed == 7
        assert (sampler.num_replicas, sampler.rank) == (strategy.world_size, strategy.global_rank)
        assert processed.batch_size == batch_size and processed.drop_last == drop_last
        assert strategy.process_dataloader(processed) is processed
        indices = [int(index) for (batch,) in processed for index in batch]
        return {"indices": indices, "batches": len(processed)}
    finally:
        strategy.teardown()


def no_backward_sync_accumulation_equals_one_big_step(batch: int) -> dict[str, Any]:
    strategy = ddp_strategy()
    try:
        rank, world = strategy.global_rank, strategy.world_size
        module = strategy.setup_module(make_model())
        optimizer = strategy.setup_optimizer(torch.optim.SGD(module.parameters(), lr=LR))
        inputs, targets = make_data(1, 2 * batch * world)
        # Rank r's two micro-batches: samples [2rb, 2rb+b) and [2rb+b, 2rb+2b).
        first = slice(2 * rank * batch, 2 * rank * batch + batch)
        second = slice(2 * rank * batch + batch, 2 * (rank + 1) * batch)
        with strategy.no_backward_sync(module):
            loss = torch.nn.functional.mse_loss(module(inputs[0, first]), targets[0, first])
            strategy.backward(loss / 2, module)
        local = torch.cat([p.grad.reshape(-1) for p in module.parameters()])  # type: ignore[union-attr]
        everyone = strategy.collective.all_gather(local)
        assert not torch.allclose(everyone[0], everyone[1]), "gradients synchronised in no_sync"
        loss = torch.nn.functional.mse_loss(module(inputs[0, second]), targets[0, second])
        strategy.backward(loss / 2, module)
        synced = torch.cat([p.grad.reshape(-1) for p in module.parameters()])  # type: ignore[union-attr]
        everyone = strategy.collective.all_gather(synced)
        assert torch.allclose(everyone[0], everyone[1]), "the last backward did not synchronise"
        strategy.optimizer_step(optimizer)
        expected = train_single_process(1, 2 * batch * world)
        trained = strategy.module_state_dict(module)
        difference = max((trained[k] - expected[k]).abs().max().item() for k in expected)
        assert difference < 1e-5, difference
        with strategy.no_backward_sync(module, enabled=False):
            pass
        _expect(ConfigurationError, lambda: strategy.no_backward_sync(make_model()))
        return {"difference": difference}
    finally:
        strategy.teardown()


def clip_gradients_returns_the_global_norm(batch: int, max_norm: float) -> dict[str, float]:
    strategy = ddp_strategy()
    try:
        rank, world = strategy.global_rank, strategy.world_size
        module = strategy.setup_module(make_model())
        optimizer = strategy.setup_optimizer(torch.optim.SGD(module.parameters(), lr=LR))
        inputs, targets = make_data(1, batch * world)
        mine = slice(rank * batch, (rank + 1) * batch)
        loss = torch.nn.functional.mse_loss(module(inputs[0, mine]), targets[0, mine])
        strategy.backward(loss, module)
        norm = strategy.clip_gradients_norm(module, optimizer, max_norm)
        reference = make_model()
        torch.nn.functional.mse_loss(reference(inputs[0]), targets[0]).backward()
        grads = [p.grad for p in reference.parameters() if p.grad is not None]
        expected = torch.linalg.vector_norm(torch.stack([g.norm() for g in grads])).item()
        clipped = torch.linalg.vector_norm(
            torch.stack([p.grad.norm() for p in module.parameters()])  # type: ignore[union-attr]
        ).item()
        assert expected > max_norm * 2, "the test needs gradients larger than max_norm"
        assert abs(norm.item() - expected) < 1e-5 * max(1.0, expected), (norm, expected)
        assert abs(clipped - max_norm) < 1e-4, clipped
        return {"norm": norm.item(), "expected": expected, "clipped": clipped}
    finally:
        strategy.teardown()


def picklable_before_setup() -> bool:
    """A DDP strategy crosses a spawn boundary before setup (MultiprocessingLauncher)."""
    strategy = DDPStrategy(parallel_devices=[CPU, CPU], start_method="spawn")
    copy = pickle.loads(pickle.dumps(strategy))
    return type(copy.launcher).__name__ == "MultiprocessingLauncher"


# -- the conformance kit ---------------------------------------------------------------------


def conformance_collective_checks() -> dict[str, str]:
    """Every collective check of the kit (behaviour and distributed layers) on this rank, in
    the same order on every rank; the outcome of each by name."""
    from trainspec.conformance.core import CheckSkipped, Target, checks_for

    target = Target(
        kind="collective",
        factory=lambda: TorchCollective(timeout=timedelta(seconds=30)),
        name="TorchCollective",
        options={"device": "cpu", "environment_factory": LocalEnvironment},
    )
    outcomes: dict[str, str] = {}
    for check in checks_for("collective"):
        if check.layer not in ("behaviour", "distributed"):
            continue
        try:
            check.run(target)
            outcomes[check.name] = "pass"
        except CheckSkipped as skipped:
            outcomes[check.name] = f"skip: {skipped.reason}"
        except AssertionError as failure:
            outcomes[check.name] = f"fail: {failure}"
    return outcomes
