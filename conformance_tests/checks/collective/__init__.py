"""Behaviour checks for :class:`trainspec.Collective` (COLL-1 ... COLL-16).

Every check makes a fresh collective, sets it up with an environment and a device, runs one
rule and tears it down. Expected results are functions of the collective's own ``rank`` and
``world_size``: rank *r* contributes ``BASE * (r + 1)`` (and, for list operations, entry *i*
is ``BASE * (r + 1) + 10 * i``), so the same check is correct on one rank and on N ranks run
by a distributed harness. Checks that need a second rank (a timeout, a peer that leaves) are
in the ``distributed`` layer and skip on a world of one.

Target options read here:

``device`` (``str`` or ``torch.device``, default ``"cpu"``)
    The device passed to ``setup`` and on which input tensors are made.
``environment_factory`` (zero-argument callable returning a :class:`trainspec.
ClusterEnvironment`, default :class:`~trainspec.conformance.fakes.SingleProcessEnvironment`)
    Called for every ``setup``; a harness running N ranks gives each rank its own description.

No optional capabilities: every member of the protocol is required.

The checks live in one module per clause group (listed, in this order, in
:data:`trainspec.conformance.kinds.KIND_TABLE`); :mod:`._fixtures` holds the shared helpers.
Every public name is re-exported here.

- :mod:`.common_rules`: COLL-1 ... COLL-3
- :mod:`.lifecycle`: COLL-4, COLL-5
- :mod:`.reductions`: COLL-6, COLL-7
- :mod:`.gather_and_broadcast`: COLL-8 ... COLL-11
- :mod:`.scatter_and_barrier`: COLL-12 ... COLL-16
"""

from __future__ import annotations

from typing import Final

from trainspec.conformance.checks.collective._fixtures import (
    BASE,
    contribution,
    device_option,
    environment_option,
    expected_reduction,
    shares_storage,
    show,
    tensors_match,
    values,
)
from trainspec.conformance.checks.collective.common_rules import (
    check_collective_operations_accept_a_timeout,
    check_collective_operations_leave_inputs_unchanged_and_return_new_tensors,
    check_collective_peer_that_leaves_makes_others_raise_collective_error,
    check_collective_timeout_raises_and_tears_the_group_down,
)
from trainspec.conformance.checks.collective.gather_and_broadcast import (
    check_collective_all_gather_accepts_any_layout_and_dtype,
    check_collective_all_gather_object_returns_every_rank_in_rank_order,
    check_collective_all_gather_returns_every_rank_in_rank_order,
    check_collective_broadcast_delivers_the_source_rank_tensor,
    check_collective_broadcast_object_delivers_a_copy_of_the_source_object,
    check_collective_broadcast_rejects_a_source_outside_the_world,
)
from trainspec.conformance.checks.collective.lifecycle import (
    check_collective_rank_is_within_world_size,
    check_collective_refuses_operations_before_setup,
    check_collective_setup_adopts_the_environment_ranks,
    check_collective_teardown_is_idempotent_and_allows_setup_again,
)
from trainspec.conformance.checks.collective.reductions import (
    check_collective_all_reduce_accepts_any_layout_and_dtype,
    check_collective_all_reduce_computes_every_reduce_op,
    check_collective_all_reduce_defaults_to_mean,
    check_collective_all_reduce_mean_is_sum_over_world_size,
    check_collective_rejects_unknown_reduce_ops,
)
from trainspec.conformance.checks.collective.scatter_and_barrier import (
    check_collective_all_to_all_exchanges_by_rank,
    check_collective_barrier_returns_once_every_rank_arrived,
    check_collective_gather_collects_on_the_destination_only,
    check_collective_reduce_scatter_reduces_each_rank_its_share,
    check_collective_scatter_delivers_each_rank_its_tensor,
    check_collective_scatter_rejects_a_list_of_the_wrong_length,
)
from trainspec.conformance.kinds import KIND_TABLE

__all__ = [
    "BASE",
    "CAPABILITIES",
    "check_collective_all_gather_accepts_any_layout_and_dtype",
    "check_collective_all_gather_object_returns_every_rank_in_rank_order",
    "check_collective_all_gather_returns_every_rank_in_rank_order",
    "check_collective_all_reduce_accepts_any_layout_and_dtype",
    "check_collective_all_reduce_computes_every_reduce_op",
    "check_collective_all_reduce_defaults_to_mean",
    "check_collective_all_reduce_mean_is_sum_over_world_size",
    "check_collective_all_to_all_exchanges_by_rank",
    "check_collective_barrier_returns_once_every_rank_arrived",
    "check_collective_broadcast_delivers_the_source_rank_tensor",
    "check_collective_broadcast_object_delivers_a_copy_of_the_source_object",
    "check_collective_broadcast_rejects_a_source_outside_the_world",
    "check_collective_gather_collects_on_the_destination_only",
    "check_collective_operations_accept_a_timeout",
    "check_collective_operations_leave_inputs_unchanged_and_return_new_tensors",
    "check_collective_peer_that_leaves_makes_others_raise_collective_error",
    "check_collective_rank_is_within_world_size",
    "check_collective_reduce_scatter_reduces_each_rank_its_share",
    "check_collective_refuses_operations_before_setup",
    "check_collective_rejects_unknown_reduce_ops",
    "check_collective_scatter_delivers_each_rank_its_tensor",
    "check_collective_scatter_rejects_a_list_of_the_wrong_length",
    "check_collective_setup_adopts_the_environment_ranks",
    "check_collective_teardown_is_idempotent_and_allows_setup_again",
    "check_collective_timeout_raises_and_tears_the_group_down",
    "contribution",
    "device_option",
    "environment_option",
    "expected_reduction",
    "shares_storage",
    "show",
    "tensors_match",
    "values",
]

CAPABILITIES: Final[dict[str, str]] = dict(KIND_TABLE["collective"].vocabulary)
"""The kind's capability vocabulary (name -> description), read from the table of kinds
(:data:`trainspec.conformance.kinds.KIND_TABLE`), where each capability is described once."""
