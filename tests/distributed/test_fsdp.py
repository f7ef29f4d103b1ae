"""FSDPStrategy and DCPCheckpointIO on two gloo ranks: training parity with one process on the
combined batch (E2E-1), exact resume under both checkpoint layouts (E2E-2), checkpoints that
move between FSDP, DDP and single-device training and between 2 and 1 ranks (E2E-3, DCKPT-5),
the global clipping norm (STRAT-11), gradient accumulation (SYNC-1), sharded construction
(SHARD-1) and the distributed checkpoint IO's failure, damage and removal rules (DCKPT-3,
DCKPT-4, DCKPT-6)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.distributed

FSDP_SCENARIOS = Path(__file__).parent / "fsdp_scenarios.py"


def run(world: Any, name: str, *args: object) -> list[Any]:
    return world.run(name, *args, scenarios=FSDP_SCENARIOS)


@pytest.mark.parametrize(
    ("layout", "flag", "optimizer", "tolerance"),
    [
        ("sharded", "32-true", "sgd", 1e-5),
        ("full", "32-true", "adam", 1e-5),
        ("sharded", "bf16-mixed", "sgd", 5e-2),
        ("sharded", "bf16-true", "sgd", 5e-2),
    ],
)
def test_fsdp_training_equals_single_process_training_on_the_combined_batch(
    world: Any, layout: str, flag: str, optimizer: str, tolerance: float
) -> None:
    results = run(world, "fsdp_trains_like_one_process", 3, 4, layout, flag, optimizer)
    assert results[0]["keys"] == ["0.bias", "0.weight", "2.bias", "2.weight"]
    assert all(result["difference"] < tolerance for result in results), results


@pytest.mark.parametrize("layout", ["sharded", "full"])
def test_fsdp_resume_continues_exactly(world: Any, tmp_path: Path, layout: str) -> None:
    results = run(world, "fsdp_resume_is_exact", str(tmp_path), layout)
    assert [result["equal"] for result in results] == [True, True]
    if layout == "sharded":
        files = results[0]["files"]
        assert files[0] == "trainspec-dcp.json" and len(files) == 2, files


def test_checkpoints_move_between_fsdp_ddp_and_single_device_and_reshard(
    world: Any, tmp_path: Path
) -> None:
    results = run(world, "checkpoints_move_between_fsdp_ddp_and_single_device", str(tmp_path))
    for result in results:
        assert result == {
            "single_from_fsdp": True,
            "optimizer_from_fsdp": True,
            "ddp_from_fsdp": True,
            "fsdp_full_from_ddp": True,
            "full_layout_optimizer_is_complete": True,
            "fsdp_from_one_rank": True,
        }


def test_fsdp_clip_gradients_norm_returns_the_global_norm_and_clips(world: Any) -> None:
    results = run(world, "fsdp_clip_returns_the_global_norm", 0.01)
    for result in results:
        assert result["norm"] == pytest.approx(result["expected"], rel=1e-5)
        assert result["clipped"] == pytest.approx(0.01, rel=1e-3)
        assert result["is_dtensor"] is False


def test_fsdp_no_backward_sync_accumulation_equals_one_step_on_the_union(world: Any) -> None:
    results = run(world, "fsdp_no_backward_sync_accumulates_like_one_step")
    assert all(result["difference"] < 1e-5 for result in results), results


def test_sharded_context_trains_alike_and_no_rank_holds_the_whole_module(world: Any) -> None:
    results = run(world, "sharded_context_trains_alike_and_never_holds_the_whole_module")
    for result in results:
        assert result["difference"] < 1e-6
        assert 0 < result["peak"] < result["total"], result


def test_strict_loading_names_the_unexpected_keys(world: Any) -> None:
    assert run(world, "fsdp_strict_loading_names_keys") == [{"strict_names_key": True}] * 2


def test_a_save_failing_on_one_rank_fails_every_rank_and_keeps_the_old_checkpoint(
    world: Any, tmp_path: Path
) -> None:
    results = run(world, "dcp_failure_on_one_rank_reaches_every_rank", str(tmp_path))
    assert results[1]["raised"] == "TypeError"
    assert results[0]["raised"] in ("CheckpointWriteError", "CollectiveError")
    assert [result["kept"] for result in results] == [[1.0, 1.0]] * 2


def test_an_interrupt_on_one_rank_is_its_own_and_a_failed_save_on_the_others(
    world: Any, tmp_path: Path
) -> None:
    results = run(world, "dcp_interrupt_on_one_rank", str(tmp_path))
    assert results[0]["raised"] == "KeyboardInterrupt"
    assert results[1]["raised"].startswith("CheckpointWriteError"), results[1]
    assert "rank 0" in results[1]["raised"] or "KeyboardInterrupt" in results[1]["raised"]
    assert [result["kept"] for result in results] == [[1.0, 1.0]] * 2


def test_damaged_sharded_checkpoints_raise_checkpoint_errors(world: Any, tmp_path: Path) -> None:
    results = run(world, "dcp_damaged_checkpoints_raise_checkpoint_errors", str(tmp_path))
    assert results[0]["files"] >= 4  # pointer, metadata, skeleton, one part per rank
    for result in results:
        assert set(result["outcomes"]) == {"corrupted"}, result["outcomes"]


def test_sharded_remove_is_collective_and_idempotent(world: Any, tmp_path: Path) -> None:
    assert (
        run(world, "dcp_remove_is_collective_and_idempotent", str(tmp_path))
        == [{"gone": True, "missing": True, "kept": [1.0]}] * 2
    )


def test_sharded_state_dicts_round_trip_in_memory(world: Any) -> None:
    assert run(world, "fsdp_sharded_state_dicts_round_trip_in_memory") == [{"equal": True}] * 2
