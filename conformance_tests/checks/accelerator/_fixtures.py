"""Helpers shared by the Accelerator checks: the first usable device and a device of another
type."""

from __future__ import annotations

import os
import threading
from typing import TYPE_CHECKING

import torch

from trainspec.accelerator import Accelerator
from trainspec.conformance._helpers import describe_value, failure
from trainspec.conformance.core import Target

if TYPE_CHECKING:
    from collections.abc import Callable

_Target = Target[Accelerator]


# --------------------------------------------------------------------------- ACC-2


def _global_state() -> dict[str, object]:
    """Process-wide state that availability queries must leave alone."""
    state: dict[str, object] = {
        "torch.get_default_dtype()": torch.get_default_dtype(),
        "torch.get_default_device()": torch.get_default_device(),
        "torch.is_grad_enabled()": torch.is_grad_enabled(),
        "torch.get_num_threads()": torch.get_num_threads(),
        "torch.are_deterministic_algorithms_enabled()": (
            torch.are_deterministic_algorithms_enabled()
        ),
        "torch.is_autocast_enabled('cpu')": torch.is_autocast_enabled("cpu"),
        "torch.random.get_rng_state()": bytes(torch.random.get_rng_state().tolist()),
        "os.environ": dict(os.environ),
        "live threads": frozenset(threading.enumerate()),
    }
    for name in ("cuda", "xpu", "mtia"):
        module = getattr(torch, name, None)
        is_initialized = getattr(module, "is_initialized", None)
        if callable(is_initialized):
            state[f"torch.{name}.is_initialized()"] = is_initialized()
    return state


def _state_changes(before: dict[str, object], after: dict[str, object]) -> list[str]:
    changes: list[str] = []
    for key in sorted(set(before) | set(after)):
        old, new = before.get(key), after.get(key)
        if old == new:
            continue
        if isinstance(old, frozenset) and isinstance(new, frozenset):
            # Threads of other components may end meanwhile; only new ones are a side effect.
            started = sorted(t.name for t in new - old if t.is_alive())
            if started:
                changes.append(f"started threads {started}")
        elif isinstance(old, dict) and isinstance(new, dict):
            changed = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))
            changes.append(f"{key} changed at {changed!r}")
        elif key == "torch.random.get_rng_state()":
            changes.append("the global RNG state changed")
        else:
            changes.append(f"{key}: {describe_value(old)} -> {describe_value(new)}")
    return changes


def _assert_no_side_effects(
    target: _Target, clause: str, what: str, call: Callable[[Accelerator], object], repro: str
) -> None:
    acc = target.make()
    before = _global_state()
    environ, default_dtype = dict(os.environ), torch.get_default_dtype()
    try:
        call(acc)
    except Exception:
        pass  # raising is judged by the checks of the call itself; only state matters here
    changes = _state_changes(before, _global_state())
    if changes:
        # Reported below, so undoing what can be undone is not a silent repair: it keeps the
        # change from leaking into the caller's process and the checks that run after this one.
        os.environ.clear()
        os.environ.update(environ)
        torch.set_default_dtype(default_dtype)
        raise failure(
            target,
            clause,
            expected=f"leave process-wide state unchanged in {what}",
            actual="; ".join(changes),
            hint="Query availability without initialising the device, starting threads, "
            "changing torch defaults or environment variables.",
            snippet=repro,
        )
