"""Train a small model with an unchanged ``DDPStrategy`` on two CPU ranks.

``python train_script.py OUTDIR`` starts the second rank itself (the strategy's launcher);
``torchrun --nproc-per-node 2 train_script.py OUTDIR`` starts both and the strategy detects
it. Either way every rank writes ``OUTDIR/rank-<r>.json`` with what it saw and how far its
weights are from one process trained on the combined batch.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
from scenarios import CPU, LR, make_data, make_model, train_single_process

from trainspec.reference.strategies.ddp import DDPStrategy

STEPS, BATCH = 3, 4


def train(strategy: DDPStrategy, outdir: str, launcher: str | None) -> None:
    strategy.setup_environment()
    try:
        rank, world = strategy.global_rank, strategy.world_size
        module = strategy.setup_module(make_model())
        optimizer = strategy.setup_optimizer(torch.optim.SGD(module.parameters(), lr=LR))
        inputs, targets = make_data(STEPS, BATCH * world)
        mine = slice(rank * BATCH, (rank + 1) * BATCH)
        for step in range(STEPS):
            optimizer.zero_grad()
            loss = torch.nn.functional.mse_loss(module(inputs[step, mine]), targets[step, mine])
            strategy.backward(loss, module)
            strategy.optimizer_step(optimizer)
        trained = strategy.module_state_dict(module)
        expected = train_single_process(STEPS, BATCH * world)
        difference = max((trained[k] - expected[k]).abs().max().item() for k in expected)
        report = {
            "rank": rank,
            "world": world,
            "environment": type(strategy.cluster_environment).__name__,
            "launcher": launcher,
            "keys": sorted(trained),
            "difference": difference,
        }
        Path(outdir, f"rank-{rank}.json").write_text(json.dumps(report))
        strategy.barrier()
    finally:
        strategy.teardown()


def main() -> None:
    outdir = sys.argv[1]
    strategy = DDPStrategy(parallel_devices=[CPU, CPU])
    launcher = strategy.launcher
    name = None if launcher is None else type(launcher).__name__
    if launcher is not None:
        launcher.launch(train, strategy, outdir, name)
    else:
        train(strategy, outdir, name)


if __name__ == "__main__":
    main()
