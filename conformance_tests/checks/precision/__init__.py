"""Behaviour checks for :class:`trainspec.Precision` (clauses PREC-1 ... PREC-12).

Every check makes a fresh precision with ``target.make()``, calls ``setup(device)`` and drives
a small probe module (two ``Linear`` layers, a float buffer, an ``int64`` and a ``bool``
buffer) through the lifecycle. When ``setup`` raises :class:`~trainspec.UnsupportedError` for
the device (allowed by PREC-2) the device-bound checks are skipped.

Gradient checks compare with a reference computed by plain autograd on a deep copy of the
converted module, in the parameter dtype, outside any precision context; tolerances are loose
(5 %) because mixed precisions compute in half precision, and the faults they catch (a missing
or doubled unscale) are off by the loss scale.

Options read from ``target.options``:

``device`` (str or torch.device, default ``"cpu"``)
    The device training runs on: passed to ``setup`` and used for every tensor.

The checks live in one module per clause group (listed, in this order, in
:data:`trainspec.conformance.kinds.KIND_TABLE`); :mod:`._fixtures` holds the shared helpers.
Every public name is re-exported here.

- :mod:`.dtypes`: PREC-1 (with the dtype rules of PREC-3 and PREC-5)
- :mod:`.setup`: PREC-2
- :mod:`.conversion`: PREC-3, PREC-4
- :mod:`.contexts`: PREC-5, PREC-6
- :mod:`.steps`: PREC-7 ... PREC-10
- :mod:`.state`: PREC-11, PREC-12
"""

from __future__ import annotations

from typing import Final

from trainspec.conformance.checks.precision._fixtures import FLAG_DTYPES
from trainspec.conformance.checks.precision.contexts import (
    check_precision_forward_context_restores_autocast_state,
    check_precision_forward_context_restores_default_dtype,
    check_precision_module_init_context_restores_default_dtype,
)
from trainspec.conformance.checks.precision.conversion import (
    check_precision_convert_input_casts_only_floating_tensors,
    check_precision_convert_module_leaves_non_float_tensors_unchanged,
)
from trainspec.conformance.checks.precision.dtypes import (
    check_precision_convert_module_casts_parameters_to_param_dtype,
    check_precision_flag_and_dtypes_match_the_flag_table,
    check_precision_forward_context_computes_in_compute_dtype,
    check_precision_forward_context_enables_autocast_in_compute_dtype,
    check_precision_module_init_context_creates_parameters_in_param_dtype,
)
from trainspec.conformance.checks.precision.setup import (
    check_precision_raises_instead_of_silently_disabling,
    check_precision_setup_refuses_devices_it_cannot_compute_on,
)
from trainspec.conformance.checks.precision.state import (
    check_precision_load_state_dict_rejects_malformed_state,
    check_precision_state_dict_round_trips,
    check_precision_teardown_is_idempotent_and_allows_setup_again,
)
from trainspec.conformance.checks.precision.steps import (
    check_precision_backward_produces_true_gradients_after_unscaling,
    check_precision_optimizer_step_returns_true_when_it_steps,
    check_precision_skips_steps_with_non_finite_gradients,
    check_precision_unscales_exactly_once_per_step,
    check_precision_without_scaling_always_steps,
)
from trainspec.conformance.kinds import KIND_TABLE

__all__ = [
    "CAPABILITIES",
    "FLAG_DTYPES",
    "check_precision_backward_produces_true_gradients_after_unscaling",
    "check_precision_convert_input_casts_only_floating_tensors",
    "check_precision_convert_module_casts_parameters_to_param_dtype",
    "check_precision_convert_module_leaves_non_float_tensors_unchanged",
    "check_precision_flag_and_dtypes_match_the_flag_table",
    "check_precision_forward_context_computes_in_compute_dtype",
    "check_precision_forward_context_enables_autocast_in_compute_dtype",
    "check_precision_forward_context_restores_autocast_state",
    "check_precision_forward_context_restores_default_dtype",
    "check_precision_load_state_dict_rejects_malformed_state",
    "check_precision_module_init_context_creates_parameters_in_param_dtype",
    "check_precision_module_init_context_restores_default_dtype",
    "check_precision_optimizer_step_returns_true_when_it_steps",
    "check_precision_raises_instead_of_silently_disabling",
    "check_precision_setup_refuses_devices_it_cannot_compute_on",
    "check_precision_skips_steps_with_non_finite_gradients",
    "check_precision_state_dict_round_trips",
    "check_precision_teardown_is_idempotent_and_allows_setup_again",
    "check_precision_unscales_exactly_once_per_step",
    "check_precision_without_scaling_always_steps",
]

CAPABILITIES: Final[dict[str, str]] = dict(KIND_TABLE["precision"].vocabulary)
"""The kind's capability vocabulary (name -> description), read from the table of kinds
(:data:`trainspec.conformance.kinds.KIND_TABLE`), where each capability is described once."""
