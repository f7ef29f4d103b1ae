"""trainspec plugins in Lightning's Trainer: ``fit`` with a bridged accelerator, precision
(every flag) and checkpoint IO (torch, async, the example's gzip IO), and a resume from a
checkpoint that equals the uninterrupted run bit for bit; with the safetensors IO, what a
Trainer can and cannot save."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest
import torch

pytest.importorskip("lightning")

import lightning.pytorch as pl

from tests.bridges._lightning_helpers import (
    FLAGS,
    LIGHTNING_WARNINGS,
    assert_bit_equal,
    make_model,
)
from trainspec.bridges.lightning import (
    to_lightning_accelerator,
    to_lightning_checkpoint_io,
    to_trainer_precision,
)
from trainspec.reference.accelerators.cpu import CPUAccelerator
from trainspec.reference.checkpoint_io.background import BackgroundCheckpointIO
from trainspec.reference.checkpoint_io.safetensors_io import SafetensorsCheckpointIO
from trainspec.reference.checkpoint_io.torch_io import TorchCheckpointIO
from trainspec.reference.precisions import precision_for_flag

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from trainspec import CheckpointIO

pytestmark = [pytest.mark.filterwarnings(w) for w in LIGHTNING_WARNINGS]


class _Module(pl.LightningModule):
    def __init__(self, seed: int) -> None:
        super().__init__()
        self.net = make_model(seed)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        (x,) = batch
        return self.net(x).float().pow(2).mean()

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.05, momentum=0.9)


def _loader() -> torch.utils.data.DataLoader[Any]:
    generator = torch.Generator().manual_seed(1)
    dataset = torch.utils.data.TensorDataset(torch.randn(16, 4, generator=generator))
    return torch.utils.data.DataLoader(dataset, batch_size=8)  # 2 steps per epoch


def _trainer(flag: str, io: CheckpointIO, epochs: int, root: Path) -> pl.Trainer:
    return pl.Trainer(
        accelerator=to_lightning_accelerator(CPUAccelerator()),
        devices=1,
        max_epochs=epochs,
        plugins=[to_trainer_precision(precision_for_flag(flag)), to_lightning_checkpoint_io(io)],
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        gradient_clip_val=1.0,
        default_root_dir=str(root),
    )


def _fit_and_resume(
    flag: str, make_io: Callable[[], CheckpointIO], root: Path
) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    module = _Module(0)
    initial = {k: v.detach().clone() for k, v in module.net.state_dict().items()}
    _trainer(flag, make_io(), 2, root).fit(module, _loader())
    uninterrupted = {k: v.detach().clone() for k, v in module.net.state_dict().items()}

    path = str(root / "epoch1.ckpt")
    first = _Module(0)
    trainer = _trainer(flag, make_io(), 1, root)
    trainer.fit(first, _loader())
    trainer.save_checkpoint(path)
    trainer.strategy.checkpoint_io.teardown()  # an async IO finishes its write

    # Built under init_module: the Trainer restores weights *before* the precision converts the
    # module, so a float32 module would round 64-true weights (Lightning's own "64-true" does
    # the same; see docs/bridges/use-in-lightning.md).
    trainer = _trainer(flag, make_io(), 2, root)
    with trainer.init_module():
        resumed = _Module(3)
    trainer.fit(resumed, _loader(), ckpt_path=path)
    return initial, uninterrupted, {k: v.detach() for k, v in resumed.net.state_dict().items()}


@pytest.mark.parametrize("flag", FLAGS)
def test_trainer_fit_with_bridged_plugins_resumes_bit_exactly_for_every_flag(
    flag: str, tmp_path: Path
) -> None:
    initial, uninterrupted, resumed = _fit_and_resume(flag, TorchCheckpointIO, tmp_path)
    assert all(t.dtype == precision_for_flag(flag).param_dtype for t in uninterrupted.values())
    assert any(not torch.equal(initial[k], uninterrupted[k]) for k in initial)
    assert_bit_equal(uninterrupted, resumed)


def test_trainer_resumes_bit_exactly_through_the_async_checkpoint_io(tmp_path: Path) -> None:
    _, uninterrupted, resumed = _fit_and_resume(
        "16-mixed", lambda: BackgroundCheckpointIO(TorchCheckpointIO()), tmp_path
    )
    assert_bit_equal(uninterrupted, resumed)


def test_trainer_resumes_bit_exactly_through_the_example_plugins_io(tmp_path: Path) -> None:
    example = pytest.importorskip("trainspec_example")
    _, uninterrupted, resumed = _fit_and_resume("32-true", example.CompressedCheckpointIO, tmp_path)
    assert_bit_equal(uninterrupted, resumed)


def test_trainer_with_safetensors_io_saves_weights_through_the_strategy_only(
    tmp_path: Path,
) -> None:
    """A Trainer checkpoint is never a flat dict of tensors: ``dump_checkpoint`` puts
    ``epoch``, ``global_step``, the version string and ``loops`` in it even with
    ``weights_only=True``, so ``Trainer.save_checkpoint`` (and ``ModelCheckpoint``) get the
    safetensors IO's ``TypeError`` and ``fit(ckpt_path=...)`` cannot resume from weights. The
    module's state dict, saved and loaded through the Trainer's strategy, round-trips bit for
    bit (docs/bridges/use-in-lightning.md)."""
    module = _Module(0)
    trainer = _trainer("32-true", SafetensorsCheckpointIO(), 1, tmp_path)
    trainer.fit(module, _loader())
    for weights_only in (True, False):
        with pytest.raises(TypeError, match="epoch"):
            trainer.save_checkpoint(str(tmp_path / "full.safetensors"), weights_only=weights_only)

    path = str(tmp_path / "weights.safetensors")
    trainer.strategy.save_checkpoint(module.state_dict(), path)
    fresh = _Module(5)
    assert any(
        not torch.equal(a, b)
        for a, b in zip(fresh.state_dict().values(), module.state_dict().values(), strict=True)
    )
    fresh.load_state_dict(trainer.strategy.load_checkpoint(path))
    assert_bit_equal(module.state_dict(), fresh.state_dict())
