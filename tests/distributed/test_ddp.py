"""DDPStrategy on two gloo ranks: training parity with one process on the combined batch
(E2E-1), checkpoints that move to a single-device strategy and back (E2E-3, STRAT-14),
data sharding (STRAT-8), gradient accumulation (SYNC-1) and global-norm clipping
(STRAT-11)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.distributed


def test_ddp_training_equals_single_process_training_on_the_combined_batch(world: Any) -> None:
    results = world.run("ddp_trains_like_one_process_on_the_combined_batch", 3, 4)
    assert results[0]["keys"] == results[1]["keys"] == ["0.bias", "0.weight", "2.bias", "2.weight"]


def test_ddp_checkpoint_loads_into_a_single_device_strategy_and_back(
    world: Any, tmp_path: Path
) -> None:
    results = world.run("ddp_checkpoint_moves_to_single_device_and_back", str(tmp_path))
    assert (
        results[0]
        == results[1]
        == {
            "keys": ["0.bias", "0.weight", "2.bias", "2.weight"],
            "step": 1,
        }
    )
    assert (tmp_path / "ddp.ckpt").is_file()


@pytest.mark.parametrize(
    ("samples", "batch_size", "shuffle", "drop_last"),
    [(11, 2, True, False), (11, 2, False, False), (10, 3, True, True)],
)
def test_process_dataloader_gives_disjoint_shares_that_cover_the_data(
    world: Any, samples: int, batch_size: int, shuffle: bool, drop_last: bool
) -> None:
    shares = [
        r["indices"]
        for r in world.run("process_dataloader_shares", samples, batch_size, shuffle, drop_last)
    ]
    per_rank = -(-samples // 2)  # the sampler pads to a multiple of the world size
    padding = per_rank * 2 - samples
    if drop_last:
        full = per_rank // batch_size * batch_size
        assert [len(share) for share in shares] == [full, full]
    else:
        assert [len(share) for share in shares] == [per_rank, per_rank]
        assert set(shares[0]) | set(shares[1]) == set(range(samples))
    assert len(set(shares[0]) & set(shares[1])) <= padding
    sequential = [list(range(samples + padding))[rank::2] for rank in range(2)]
    sequential = [[index % samples for index in share] for share in sequential]
    if shuffle:
        assert shares != [share[: len(shares[0])] for share in sequential]
    else:
        assert shares == sequential


def test_no_backward_sync_accumulation_equals_one_step_on_the_union(world: Any) -> None:
    results = world.run("no_backward_sync_accumulation_equals_one_big_step", 3)
    assert all(result["difference"] < 1e-5 for result in results)


def test_clip_gradients_norm_returns_the_global_norm_and_clips(world: Any) -> None:
    results = world.run("clip_gradients_returns_the_global_norm", 4, 0.01)
    assert results[0]["norm"] == pytest.approx(results[1]["norm"])
    assert results[0]["norm"] == pytest.approx(results[0]["expected"], rel=1e-5)


def test_ddp_strategy_is_picklable_before_setup(world: Any) -> None:
    assert world.run("picklable_before_setup") == [True, True]
