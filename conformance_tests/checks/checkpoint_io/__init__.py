"""Behaviour checks for :class:`trainspec.CheckpointIO` (CKPT-1 ... CKPT-14) and
:class:`trainspec.AsyncCheckpointIO` (ACKPT-1 ... ACKPT-5, capability ``"async"``).

Every check makes fresh instances with ``target.make()`` and a fresh location: a directory
(or URL prefix) of its own, removed afterwards. The checkpoints it saves are built from the
declared capabilities: flat ``dict[str, Tensor]`` of contiguous tensors unless the target
declares ``python_objects`` (nested containers and scalars), ``strided_tensors``
(non-contiguous views keep their strides) or ``shared_storage`` (views keep sharing storage).
For an asynchronous IO the synchronous checks call ``wait()`` after each save, so a
background error counts as the save's error.

Options read from ``target.options``:

``base_path`` (str, default: a fresh temporary directory per check)
    Where checks put their checkpoints: a local directory or a URL prefix
    (``"memory://ckpts"``, ``"s3://bucket/prefix"``). Each check uses a unique child of it and
    removes that child afterwards (URLs through fsspec).
``max_examples`` (int, default 20)
    Hypothesis examples for the generated round-trip check.
``dtypes`` (sequence of torch.dtype, default: every dtype the CPU supports)
    The tensor dtypes the checkpoints contain (narrow it for formats that store fewer).
``map_location_devices`` (sequence of str, default ``("cpu", "meta")``)
    Devices the map-location check loads onto; ``meta`` makes a misplaced tensor visible on
    a machine with only a CPU.
``atomicity_rounds`` (int, default 12)
    Saves made while a concurrent reader loads, in the atomicity check.
``interrupt_points`` (int, default 32)
    Interrupt points tried per operation (save, load) in the interruption check (CKPT-14):
    up to half evenly over the points in the implementation's own code, the rest evenly over
    the others; 0 tries every point.
``trusted_factory`` (callable returning a CheckpointIO, optional)
    An instance explicitly configured to trust pickled content (e.g.
    ``TorchCheckpointIO(weights_only=False)``); with it the ``pickle`` check also verifies the
    opt-in loads that content.

The checks live in one module per clause group (listed, in this order, in
:data:`trainspec.conformance.kinds.KIND_TABLE`); :mod:`._fixtures` holds the shared helpers.
Every public name is re-exported here.

- :mod:`.roundtrip`: CKPT-1, CKPT-2
- :mod:`.atomicity`: CKPT-3
- :mod:`.saving`: CKPT-4 ... CKPT-6
- :mod:`.loading`: CKPT-7 ... CKPT-10
- :mod:`.lifecycle`: CKPT-11, CKPT-12
- :mod:`.special_files`: CKPT-13
- :mod:`.interrupts`: CKPT-14
- :mod:`.async_io`: ACKPT-1 ... ACKPT-5 (capability ``async``)
"""

from __future__ import annotations

from typing import Final

from trainspec.conformance._helpers import importable_path as importable_path
from trainspec.conformance.checks.checkpoint_io._fixtures import (
    UnsafePayload,
    executed_payloads,
)
from trainspec.conformance.checks.checkpoint_io._fixtures import (
    _other_file_system as _other_file_system,  # the kit's own tests use it
)
from trainspec.conformance.checks.checkpoint_io.async_io import (
    check_async_checkpoint_io_load_and_remove_wait_for_pending_save,
    check_async_checkpoint_io_resolves_a_relative_path_at_call_time,
    check_async_checkpoint_io_snapshots_at_save_time,
    check_async_checkpoint_io_surfaces_background_errors,
    check_async_checkpoint_io_teardown_waits_for_pending_saves,
    check_async_checkpoint_io_wait_completes_every_pending_save,
    check_async_checkpoint_io_wait_raises_a_background_error_once,
)
from trainspec.conformance.checks.checkpoint_io.atomicity import (
    ExplodingValueError,
    check_checkpoint_io_concurrent_reader_sees_old_or_new_checkpoint,
    check_checkpoint_io_failed_save_leaves_previous_checkpoint_intact,
    check_checkpoint_io_killed_save_leaves_old_or_new_checkpoint,
    check_checkpoint_io_save_leaves_no_temporary_files,
    check_checkpoint_io_saves_are_atomic_on_another_file_system_than_tmpdir,
)
from trainspec.conformance.checks.checkpoint_io.interrupts import (
    check_checkpoint_io_interrupted_load_raises_the_interrupt,
    check_checkpoint_io_interrupted_save_raises_the_interrupt,
)
from trainspec.conformance.checks.checkpoint_io.lifecycle import (
    check_checkpoint_io_remove_is_idempotent,
    check_checkpoint_io_teardown_is_idempotent_and_reusable,
)
from trainspec.conformance.checks.checkpoint_io.loading import (
    check_checkpoint_io_corrupted_file_raises_corrupted_error,
    check_checkpoint_io_load_places_tensors_by_map_location,
    check_checkpoint_io_loads_unsafe_content_only_when_opted_in,
    check_checkpoint_io_missing_path_raises_not_found,
    check_checkpoint_io_refuses_unsafe_content_by_default,
)
from trainspec.conformance.checks.checkpoint_io.roundtrip import (
    check_checkpoint_io_accepts_str_and_pathlike_paths,
    check_checkpoint_io_load_returns_the_latest_save,
    check_checkpoint_io_preserves_storage_sharing,
    check_checkpoint_io_preserves_strides,
    check_checkpoint_io_rejects_values_outside_its_declared_set,
    check_checkpoint_io_round_trips_every_dtype,
    check_checkpoint_io_round_trips_generated_checkpoints,
    check_checkpoint_io_round_trips_python_values,
    check_checkpoint_io_round_trips_through_fsspec_urls,
    check_checkpoint_io_save_creates_missing_parent_directories,
    check_checkpoint_io_saved_checkpoint_is_independent_of_mutation,
)
from trainspec.conformance.checks.checkpoint_io.saving import (
    check_checkpoint_io_refused_fsync_raises_write_error_and_keeps_the_old,
    check_checkpoint_io_refused_open_raises_write_error_and_keeps_the_old,
    check_checkpoint_io_refused_parent_path_raises_checkpoint_write_error,
    check_checkpoint_io_refused_rename_raises_write_error_and_keeps_the_old,
    check_checkpoint_io_refused_write_raises_write_error_and_keeps_the_old,
    check_checkpoint_io_rejects_unknown_storage_options,
    check_checkpoint_io_save_does_not_mutate_its_input,
)
from trainspec.conformance.checks.checkpoint_io.special_files import (
    check_checkpoint_io_load_refuses_special_files_without_blocking,
    check_checkpoint_io_remove_refuses_special_files_and_keeps_them,
    check_checkpoint_io_save_refuses_special_files_and_keeps_them,
)
from trainspec.conformance.kinds import KIND_TABLE

__all__ = [
    "CAPABILITIES",
    "ExplodingValueError",
    "UnsafePayload",
    "check_async_checkpoint_io_load_and_remove_wait_for_pending_save",
    "check_async_checkpoint_io_resolves_a_relative_path_at_call_time",
    "check_async_checkpoint_io_snapshots_at_save_time",
    "check_async_checkpoint_io_surfaces_background_errors",
    "check_async_checkpoint_io_teardown_waits_for_pending_saves",
    "check_async_checkpoint_io_wait_completes_every_pending_save",
    "check_async_checkpoint_io_wait_raises_a_background_error_once",
    "check_checkpoint_io_accepts_str_and_pathlike_paths",
    "check_checkpoint_io_concurrent_reader_sees_old_or_new_checkpoint",
    "check_checkpoint_io_corrupted_file_raises_corrupted_error",
    "check_checkpoint_io_failed_save_leaves_previous_checkpoint_intact",
    "check_checkpoint_io_killed_save_leaves_old_or_new_checkpoint",
    "check_checkpoint_io_interrupted_load_raises_the_interrupt",
    "check_checkpoint_io_interrupted_save_raises_the_interrupt",
    "check_checkpoint_io_load_places_tensors_by_map_location",
    "check_checkpoint_io_load_refuses_special_files_without_blocking",
    "check_checkpoint_io_load_returns_the_latest_save",
    "check_checkpoint_io_loads_unsafe_content_only_when_opted_in",
    "check_checkpoint_io_missing_path_raises_not_found",
    "check_checkpoint_io_preserves_storage_sharing",
    "check_checkpoint_io_preserves_strides",
    "check_checkpoint_io_refused_fsync_raises_write_error_and_keeps_the_old",
    "check_checkpoint_io_refused_open_raises_write_error_and_keeps_the_old",
    "check_checkpoint_io_refused_parent_path_raises_checkpoint_write_error",
    "check_checkpoint_io_refused_rename_raises_write_error_and_keeps_the_old",
    "check_checkpoint_io_refused_write_raises_write_error_and_keeps_the_old",
    "check_checkpoint_io_refuses_unsafe_content_by_default",
    "check_checkpoint_io_rejects_unknown_storage_options",
    "check_checkpoint_io_rejects_values_outside_its_declared_set",
    "check_checkpoint_io_remove_is_idempotent",
    "check_checkpoint_io_remove_refuses_special_files_and_keeps_them",
    "check_checkpoint_io_round_trips_every_dtype",
    "check_checkpoint_io_round_trips_generated_checkpoints",
    "check_checkpoint_io_round_trips_python_values",
    "check_checkpoint_io_round_trips_through_fsspec_urls",
    "check_checkpoint_io_save_creates_missing_parent_directories",
    "check_checkpoint_io_save_does_not_mutate_its_input",
    "check_checkpoint_io_save_leaves_no_temporary_files",
    "check_checkpoint_io_save_refuses_special_files_and_keeps_them",
    "check_checkpoint_io_saved_checkpoint_is_independent_of_mutation",
    "check_checkpoint_io_saves_are_atomic_on_another_file_system_than_tmpdir",
    "check_checkpoint_io_teardown_is_idempotent_and_reusable",
    "executed_payloads",
]

CAPABILITIES: Final[dict[str, str]] = dict(KIND_TABLE["checkpoint_io"].vocabulary)
"""The kind's capability vocabulary (name -> description), read from the table of kinds
(:data:`trainspec.conformance.kinds.KIND_TABLE`), where each capability is described once."""
