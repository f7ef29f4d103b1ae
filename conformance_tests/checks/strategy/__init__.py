"""Behaviour checks for :class:`trainspec.Strategy` (STRAT-1 ... STRAT-17) and its optional
capabilities (SYNC-1, SHARD-1, STEP-1).

Every check makes a fresh strategy, runs ``setup_environment`` (except the lifecycle checks
that must run before it), exercises one rule on :class:`ProbeNet` -- a small deterministic
module -- and tears the strategy down. Expected values are computed independently in float64
on the CPU from the same module and data, and compared within a tolerance that follows the
strategy's precision.

Expected values depend on the rank only through ``global_rank`` and ``world_size``, so the
same checks run on every rank of a world started by a distributed harness. With more than one
rank, the checks that predict gradients, norms or parameters need the ``data_parallel``
capability (every rank holds the whole module and ``backward`` averages gradients over
ranks) and skip without it. Gradient checks also skip when the set-up module's parameters
are not the user's parameters (a sharded or flattened module).

Target options read here:

``checkpoint_dir`` (``str`` or ``os.PathLike``, default: a new temporary directory made by
global rank 0 and broadcast to the other ranks)
    A directory every rank can read, for the checkpoint checks.

Capabilities: the declared ``data_parallel`` and the structural ``backward_sync``,
``sharded_module`` and ``step_boundary`` (see :mod:`trainspec.conformance.capabilities`),
which enable the SYNC-1, SHARD-1 and STEP-1 checks.

The checks live in one module per clause group (listed, in this order, in
:data:`trainspec.conformance.kinds.KIND_TABLE`); :mod:`._fixtures` holds the shared helpers.
Every public name is re-exported here.

- :mod:`.lifecycle`: STRAT-1 ... STRAT-4
- :mod:`.modules`: STRAT-5 ... STRAT-7
- :mod:`.training`: STRAT-8 ... STRAT-11
- :mod:`.collectives`: STRAT-12, STRAT-13
- :mod:`.checkpoints`: STRAT-14 ... STRAT-17
- :mod:`.optional_protocols`: SYNC-1, SHARD-1, STEP-1
"""

from __future__ import annotations

from typing import Final

from trainspec.conformance.checks.strategy._fixtures import (
    IndexDataset,
    ProbeNet,
    probe_batch,
    probe_module,
)
from trainspec.conformance.checks.strategy.checkpoints import (
    check_strategy_load_checkpoint_places_tensors_on_the_root_device,
    check_strategy_load_module_state_dict_restores_and_checks_keys,
    check_strategy_module_state_dict_has_the_unwrapped_keys,
    check_strategy_optimizer_state_round_trips,
    check_strategy_remove_checkpoint_removes_it_for_every_rank,
    check_strategy_save_checkpoint_writes_a_complete_checkpoint_before_returning,
)
from trainspec.conformance.checks.strategy.collectives import (
    check_strategy_all_reduce_computes_every_reduce_op,
    check_strategy_broadcast_and_gather_follow_the_collective_rules,
    check_strategy_collective_defaults_match_the_collective_protocol,
    check_strategy_reduce_boolean_decision_agrees_across_ranks,
)
from trainspec.conformance.checks.strategy.lifecycle import (
    check_strategy_components_implement_their_protocols,
    check_strategy_ranks_are_consistent_and_global_zero_is_rank_zero,
    check_strategy_refuses_training_before_setup_environment,
    check_strategy_root_device_is_of_the_accelerator_type,
    check_strategy_teardown_is_idempotent_and_allows_setup_again,
)
from trainspec.conformance.checks.strategy.modules import (
    check_strategy_batch_to_device_keeps_the_structure,
    check_strategy_contexts_apply_the_precision_and_restore_state,
    check_strategy_setup_module_computes_the_same_function,
    check_strategy_setup_optimizer_returns_an_optimizer_of_the_module,
)
from trainspec.conformance.checks.strategy.optional_protocols import (
    check_strategy_mark_step_materialises_pending_computation,
    check_strategy_no_backward_sync_accumulation_equals_one_large_step,
    check_strategy_sharded_module_context_builds_modules_that_train_alike,
)
from trainspec.conformance.checks.strategy.training import (
    check_strategy_backward_produces_the_synchronised_gradients,
    check_strategy_clip_gradients_norm_returns_the_global_norm_before_clipping,
    check_strategy_optimizer_step_updates_the_parameters,
    check_strategy_process_dataloader_shares_are_disjoint_and_complete,
)
from trainspec.conformance.kinds import KIND_TABLE

__all__ = [
    "CAPABILITIES",
    "IndexDataset",
    "ProbeNet",
    "check_strategy_all_reduce_computes_every_reduce_op",
    "check_strategy_backward_produces_the_synchronised_gradients",
    "check_strategy_batch_to_device_keeps_the_structure",
    "check_strategy_broadcast_and_gather_follow_the_collective_rules",
    "check_strategy_clip_gradients_norm_returns_the_global_norm_before_clipping",
    "check_strategy_collective_defaults_match_the_collective_protocol",
    "check_strategy_components_implement_their_protocols",
    "check_strategy_contexts_apply_the_precision_and_restore_state",
    "check_strategy_load_checkpoint_places_tensors_on_the_root_device",
    "check_strategy_load_module_state_dict_restores_and_checks_keys",
    "check_strategy_mark_step_materialises_pending_computation",
    "check_strategy_module_state_dict_has_the_unwrapped_keys",
    "check_strategy_no_backward_sync_accumulation_equals_one_large_step",
    "check_strategy_optimizer_state_round_trips",
    "check_strategy_optimizer_step_updates_the_parameters",
    "check_strategy_process_dataloader_shares_are_disjoint_and_complete",
    "check_strategy_ranks_are_consistent_and_global_zero_is_rank_zero",
    "check_strategy_reduce_boolean_decision_agrees_across_ranks",
    "check_strategy_refuses_training_before_setup_environment",
    "check_strategy_remove_checkpoint_removes_it_for_every_rank",
    "check_strategy_root_device_is_of_the_accelerator_type",
    "check_strategy_save_checkpoint_writes_a_complete_checkpoint_before_returning",
    "check_strategy_setup_module_computes_the_same_function",
    "check_strategy_setup_optimizer_returns_an_optimizer_of_the_module",
    "check_strategy_sharded_module_context_builds_modules_that_train_alike",
    "check_strategy_teardown_is_idempotent_and_allows_setup_again",
    "probe_batch",
    "probe_module",
]

CAPABILITIES: Final[dict[str, str]] = dict(KIND_TABLE["strategy"].vocabulary)
"""The kind's capability vocabulary (name -> description), read from the table of kinds
(:data:`trainspec.conformance.kinds.KIND_TABLE`), where each capability is described once."""
