"""XLA smoke test: train a few steps on one XLA device through ``XLAStrategy``.

Run by ``scripts/xla_lane.sh`` in its own virtual environment (torch_xla installed), on
PJRT's CPU device unless ``PJRT_DEVICE`` says otherwise. Checks that training on the XLA
device matches the same training on the CPU, that the loss falls, that a checkpoint
round-trips through the strategy, and that the collectives and the step boundary work.
Exit code 0 on success. Covers the single-device path only (see xla_lane.sh).
"""

from __future__ import annotations

import copy
import os
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("PJRT_DEVICE", "CPU")

import torch

from trainspec import StepBoundary
from trainspec.reference.strategies.xla import XLAStrategy

STEPS = 5
LR = 0.1


def main() -> int:
    strategy = XLAStrategy()
    assert isinstance(strategy, StepBoundary), "XLAStrategy must implement StepBoundary"
    assert strategy.launcher is None, "one device needs no launcher"
    strategy.setup_environment()
    try:
        device = strategy.root_device
        assert device.type == "xla", device
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
        reference = copy.deepcopy(model)
        module = strategy.setup_module(model)
        optimizer = strategy.setup_optimizer(torch.optim.SGD(module.parameters(), lr=LR))
        generator = torch.Generator().manual_seed(1)
        # One fixed batch, every step: the loss on it must fall (fresh random batches with
        # random targets need not), and each step is compared with CPU training.
        inputs = torch.randn(1, 16, 4, generator=generator).repeat(STEPS, 1, 1)
        targets = torch.randn(1, 16, 2, generator=generator).repeat(STEPS, 1, 1)

        losses = []
        for step in range(STEPS):
            optimizer.zero_grad()
            with strategy.forward_context():
                output = module(strategy.batch_to_device(inputs[step]))
            loss = torch.nn.functional.mse_loss(output, strategy.batch_to_device(targets[step]))
            strategy.backward(loss, module)
            strategy.optimizer_step(optimizer)  # marks the step
            losses.append(loss.item())

        reference_optimizer = torch.optim.SGD(reference.parameters(), lr=LR)
        for step in range(STEPS):
            reference_optimizer.zero_grad()
            loss = torch.nn.functional.mse_loss(reference(inputs[step]), targets[step])
            loss.backward()  # type: ignore[no-untyped-call]
            reference_optimizer.step()
        trained = {k: v.cpu() for k, v in strategy.module_state_dict(module).items()}
        difference = max(
            (trained[k] - v).abs().max().item() for k, v in reference.state_dict().items()
        )
        assert difference < 1e-4, f"XLA training differs from CPU training by {difference}"
        assert losses[-1] < losses[0], f"the loss did not fall: {losses}"

        with tempfile.TemporaryDirectory() as directory:
            path = Path(directory) / "xla.ckpt"
            strategy.save_checkpoint({"module": strategy.module_state_dict(module)}, path)
            loaded = strategy.load_checkpoint(path)
        for key, value in loaded["module"].items():
            assert value.device.type == "xla", (key, value.device)
            assert torch.equal(value.cpu(), trained[key]), key

        probe = torch.arange(3.0, device=device)
        assert torch.equal(strategy.all_reduce(probe).cpu(), torch.arange(3.0))
        assert strategy.reduce_boolean_decision(True) is True
        strategy.barrier()
        strategy.mark_step()
    finally:
        strategy.teardown()
    print(f"XLA smoke: OK (losses {losses[0]:.4f} -> {losses[-1]:.4f}, max diff {difference:.2e})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
