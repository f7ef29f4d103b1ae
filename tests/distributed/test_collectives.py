"""TorchCollective on two gloo ranks: every operation against a direct computation, the
lifecycle, and what happens when a rank hangs or leaves (COLL-1 ... COLL-16)."""

from __future__ import annotations

from typing import Any

import pytest

pytestmark = pytest.mark.distributed


def test_all_reduce_computes_every_op_for_every_dtype_on_every_rank(world: Any) -> None:
    counts = world.run("all_reduce_matches_direct_computation")
    assert counts == [15, 15]


def test_tensor_collectives_deliver_rank_ordered_results(world: Any) -> None:
    assert world.run("tensor_collectives_match_direct_computation") == [
        {"rank": 0, "world": 2},
        {"rank": 1, "world": 2},
    ]


def test_object_collectives_deliver_copies_in_rank_order(world: Any) -> None:
    results = world.run("object_collectives_deliver_copies")
    expected = [{"rank": r, "items": [r, "x", None, 2.5]} for r in range(2)]
    assert results == [expected, expected]


def test_lifecycle_refuses_calls_outside_setup_and_allows_setup_again(world: Any) -> None:
    assert world.run("lifecycle_refuses_calls_outside_setup_and_sets_up_again") == [True, True]


def test_setup_adopts_a_default_group_the_script_created_and_leaves_it(world: Any) -> None:
    assert world.run("adopts_an_existing_default_group") == [True, True]


@pytest.mark.parametrize("operation", ["all_reduce", "all_gather_object"])
def test_a_rank_that_never_joins_makes_the_others_time_out_and_tear_down(
    world: Any, operation: str
) -> None:
    seconds = 2.0
    waiting, absent = world.run("timeout_raises_and_tears_the_group_down", seconds, operation)
    assert waiting["raised"] == "CollectiveTimeoutError"
    assert waiting["initialized"] is False
    assert waiting["after"] == "LifecycleError"
    # Gave up near the timeout instead of waiting for the 60 s default (generous bound).
    assert seconds <= waiting["waited"] < seconds + 20
    # The late rank finds its peer gone instead of hanging.
    assert absent["late_rank_error"] in ("PeerFailureError", "CollectiveTimeoutError")
    assert absent["initialized"] is False
    # The world is usable again with a fresh group.
    assert world.run("lifecycle_refuses_calls_outside_setup_and_sets_up_again") == [True, True]


def test_a_rank_that_leaves_makes_the_others_raise_peer_failure(world: Any) -> None:
    assert world.run("peer_that_leaves_makes_the_others_raise") == ["PeerFailureError", "left"]


def test_torch_collective_passes_the_conformance_kit_on_two_ranks(world: Any) -> None:
    outcomes = world.run("conformance_collective_checks", timeout=300)
    assert outcomes[0], "the kit ran no collective checks"
    for rank, by_check in enumerate(outcomes):
        failed = {name: outcome for name, outcome in by_check.items() if outcome != "pass"}
        assert not failed, f"rank {rank}: {failed}"
