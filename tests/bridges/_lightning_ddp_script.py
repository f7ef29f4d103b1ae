"""One 2-rank Fabric run (gloo, CPU) with a bridged trainspec DDPStrategy; many assertions.

Run as ``python _lightning_ddp_script.py OUT_DIR``: the trainspec strategy's launcher
(``SubprocessScriptLauncher``, bridged to Lightning's launcher) re-runs this script for rank 1.
Each rank writes ``OUT_DIR/rank<N>.json``; tests/bridges/test_lightning_ddp.py reads them.

What each rank records:

- ranks, world size and the collectives through Fabric (all_reduce sum/mean, all_gather,
  broadcast of an object from rank 1, barrier);
- parity: 3 steps of DDP with batch B per rank equal (within float tolerance) 3 steps of a
  single-device run on the 2B batch (E2E-1);
- resume: a run saved after 2 of 4 steps through the example plugin's gzip CheckpointIO
  (a third-party trainspec plugin), loaded into a fresh model on both ranks and finished,
  equals the uninterrupted run bit for bit;
- the data share ``fabric.setup_dataloaders`` gives each rank (STRAT-8);
- no_backward_sync (the trainspec strategy's BackwardSyncControl, bridged).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
from lightning.fabric import Fabric

from trainspec.bridges.lightning import to_fabric_strategy
from trainspec.reference.strategies.ddp import DDPStrategy

STEPS = 4
SPLIT = 2
BATCH = 4


def _model(seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))


def _data() -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(1)
    return [torch.randn(2 * BATCH, 4, generator=generator) for _ in range(STEPS)]


def _weights(module: torch.nn.Module) -> dict[str, list[float]]:
    inner = getattr(module, "module", module)
    return {k: v.detach().flatten().tolist() for k, v in inner.state_dict().items()}


def _train(fabric: Fabric, model: object, optimizer: object, data: list[torch.Tensor]) -> None:
    rank = fabric.global_rank
    for batch in data:
        mine = batch[rank * BATCH : (rank + 1) * BATCH]
        loss = model(mine).pow(2).mean()  # type: ignore[operator]
        fabric.backward(loss)
        optimizer.step()  # type: ignore[attr-defined]
        optimizer.zero_grad()  # type: ignore[attr-defined]


def _single_device_reference(data: list[torch.Tensor]) -> dict[str, list[float]]:
    model = _model(0)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    for batch in data:
        loss = model(batch).pow(2).mean()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    return _weights(model)


def main(fabric: Fabric, out: Path) -> None:
    import trainspec_example

    rank = fabric.global_rank
    result: dict[str, object] = {
        "global_rank": rank,
        "world_size": fabric.world_size,
        "local_rank": fabric.local_rank,
        "node_rank": fabric.node_rank,
        "is_global_zero": fabric.is_global_zero,
        "device": str(fabric.device),
    }
    value = torch.tensor([float(rank + 1)])
    result["all_reduce_sum"] = fabric.all_reduce(value, reduce_op="sum").tolist()
    result["all_reduce_mean"] = fabric.all_reduce(value).tolist()
    result["all_gather"] = fabric.all_gather(value).tolist()
    result["broadcast"] = fabric.broadcast({"from": rank}, src=1)
    fabric.barrier()

    data = _data()
    model, optimizer = fabric.setup(*_with_optimizer(_model(0)))
    _train(fabric, model, optimizer, data)
    result["uninterrupted"] = _weights(model)
    result["single_device_2b"] = _single_device_reference(data)

    strategy = fabric.strategy.trainspec_strategy  # type: ignore[attr-defined]
    strategy_io = strategy.checkpoint_io
    result["checkpoint_io"] = type(strategy_io).__name__
    assert isinstance(strategy_io, trainspec_example.CompressedCheckpointIO)
    path = str(out / "resume.pt.gz")
    model, optimizer = fabric.setup(*_with_optimizer(_model(0)))
    _train(fabric, model, optimizer, data[:SPLIT])
    fabric.save(path, {"model": model, "optimizer": optimizer, "step": SPLIT})
    result["file_exists_after_save"] = Path(path).exists()
    model, optimizer = fabric.setup(*_with_optimizer(_model(5)))
    state: dict[str, object] = {"model": model, "optimizer": optimizer, "step": 0}
    fabric.load(path, state)
    result["loaded_step"] = state["step"]
    _train(fabric, model, optimizer, data[SPLIT:])
    result["resumed"] = _weights(model)

    dataset = torch.utils.data.TensorDataset(torch.arange(10))
    loader = fabric.setup_dataloaders(torch.utils.data.DataLoader(dataset, batch_size=2))
    result["data_share"] = sorted(int(x) for (batch,) in loader for x in batch)

    model, optimizer = fabric.setup(*_with_optimizer(_model(0)))
    with fabric.no_backward_sync(model):
        fabric.backward(model(data[0][rank * BATCH : (rank + 1) * BATCH]).pow(2).mean())
    grad = next(iter(model.parameters())).grad
    assert grad is not None
    result["unsynced_grad"] = grad.flatten().tolist()
    (out / f"rank{rank}.json").write_text(json.dumps(result))


def _with_optimizer(model: torch.nn.Module) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    return model, torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)


if __name__ == "__main__":
    import trainspec_example

    out_dir = Path(sys.argv[1])
    ddp = DDPStrategy(
        parallel_devices=[torch.device("cpu")] * 2,
        checkpoint_io=trainspec_example.CompressedCheckpointIO(),
    )
    fabric = Fabric(strategy=to_fabric_strategy(ddp))
    fabric.launch(main, out_dir)
