"""Behaviour checks for :class:`trainspec.Accelerator` (clauses ACC-1 ... ACC-10).

Every check makes its own instance with ``target.make()``. Checks that need a device take the
first device of ``parse_devices(1)`` and skip when the accelerator is not available here; the
checks of ``is_available``, ``device_count`` and the parser run everywhere.

Options read from ``target.options``:

``max_examples`` (int, default 20)
    Hypothesis examples per property check (device requests).

Devices without an index (``torch.device("cpu")``) stand for process slots of a device type
that has a single ``torch.device``: a parser may return that device repeatedly (``devices=2``
on the CPU is two processes on ``cpu``). Devices with an index must be distinct.

The checks live in one module per clause group (listed, in this order, in
:data:`trainspec.conformance.kinds.KIND_TABLE`); :mod:`._fixtures` holds the shared helpers.
Every public name is re-exported here.

- :mod:`.availability`: ACC-1 ... ACC-3
- :mod:`.parsing`: ACC-4 ... ACC-6
- :mod:`.devices`: ACC-7 ... ACC-10
- :mod:`.errors`: ERR-1
"""

from __future__ import annotations

from typing import Final

from trainspec.conformance.checks.accelerator.availability import (
    check_accelerator_device_count_has_no_side_effects,
    check_accelerator_device_count_matches_availability,
    check_accelerator_device_type_is_a_constant_torch_device_type,
    check_accelerator_is_available_has_no_side_effects,
    check_accelerator_is_available_never_raises_and_is_stable,
)
from trainspec.conformance.checks.accelerator.devices import (
    check_accelerator_device_stats_are_finite_numbers,
    check_accelerator_device_stats_refuse_another_device_type,
    check_accelerator_setup_and_teardown_are_idempotent_and_repeatable,
    check_accelerator_setup_device_refuses_a_missing_index,
    check_accelerator_setup_device_refuses_another_device_type,
    check_accelerator_synchronize_refuses_another_device_type,
    check_accelerator_synchronize_waits_for_queued_work,
    check_accelerator_teardown_is_safe_without_setup,
)
from trainspec.conformance.checks.accelerator.errors import (
    check_accelerator_errors_are_trainspec_errors_that_survive_pickling,
)
from trainspec.conformance.checks.accelerator.parsing import (
    check_accelerator_parse_devices_has_no_side_effects,
    check_accelerator_parses_every_accepted_request_form,
    check_accelerator_rejects_malformed_requests,
    check_accelerator_rejects_requests_beyond_device_count,
)
from trainspec.conformance.kinds import KIND_TABLE

__all__ = [
    "CAPABILITIES",
    "check_accelerator_device_count_has_no_side_effects",
    "check_accelerator_device_count_matches_availability",
    "check_accelerator_device_stats_are_finite_numbers",
    "check_accelerator_device_stats_refuse_another_device_type",
    "check_accelerator_device_type_is_a_constant_torch_device_type",
    "check_accelerator_errors_are_trainspec_errors_that_survive_pickling",
    "check_accelerator_is_available_has_no_side_effects",
    "check_accelerator_is_available_never_raises_and_is_stable",
    "check_accelerator_parse_devices_has_no_side_effects",
    "check_accelerator_parses_every_accepted_request_form",
    "check_accelerator_rejects_malformed_requests",
    "check_accelerator_rejects_requests_beyond_device_count",
    "check_accelerator_setup_and_teardown_are_idempotent_and_repeatable",
    "check_accelerator_setup_device_refuses_a_missing_index",
    "check_accelerator_setup_device_refuses_another_device_type",
    "check_accelerator_synchronize_refuses_another_device_type",
    "check_accelerator_synchronize_waits_for_queued_work",
    "check_accelerator_teardown_is_safe_without_setup",
]

CAPABILITIES: Final[dict[str, str]] = dict(KIND_TABLE["accelerator"].vocabulary)
"""The kind's capability vocabulary (name -> description), read from the table of kinds
(:data:`trainspec.conformance.kinds.KIND_TABLE`), where each capability is described once."""
