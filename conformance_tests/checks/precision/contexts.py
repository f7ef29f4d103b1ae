"""PREC-5, PREC-6: the module-init and forward contexts restore the default dtype and the
autocast state, even when the body raises."""

from __future__ import annotations

from contextlib import AbstractContextManager, contextmanager
from typing import TYPE_CHECKING

import torch

from trainspec.conformance._helpers import failure, snippet
from trainspec.conformance.checks.precision._fixtures import _ready, _Target
from trainspec.conformance.core import check

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator


class _BodyError(Exception):
    """Raised inside a precision context to test exit by exception."""


# --------------------------------------------------------------------------- PREC-5, PREC-6


@contextmanager
def _default_dtype(dtype: torch.dtype) -> Iterator[None]:
    saved = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(saved)


def _exit_both_ways(
    target: _Target,
    clause: str,
    context_name: str,
    state_name: str,
    make_context: Callable[[], AbstractContextManager[None]],
    state: Callable[[], object],
    arrange: Callable[[], Iterator[None]],
    repro: str,
) -> None:
    """Enter the context (normal exit, then exit by exception) under each arrangement and
    compare ``state()`` before and after."""
    for how in ("normally", "by an exception"):
        with contextmanager(arrange)():
            before = state()
            context = make_context()
            try:
                with context:
                    if how != "normally":
                        raise _BodyError("raised inside the context by the conformance check")
            except _BodyError:
                pass
            else:
                if how != "normally":
                    raise failure(
                        target,
                        clause,
                        expected=f"propagate an exception raised inside {context_name}",
                        actual="the exception was swallowed",
                        hint="Do not return True from __exit__ / catch in the generator.",
                        snippet=repro,
                    )
            after = state()
        if before != after:
            raise failure(
                target,
                clause,
                expected=f"restore {state_name} on exit from {context_name}, exited {how}",
                actual=f"before {before}, after {after}",
                hint="Save the state on entry and restore it in a finally block (or use "
                "torch's own context managers).",
                snippet=repro,
            )


@check("PREC-5", "precision")
def check_precision_module_init_context_restores_default_dtype(target: _Target) -> None:
    """module_init_context restores the default dtype on exit, even when the body raises."""
    precision, _ = _ready(target)
    for start in (torch.float32, torch.float64):

        def arrange(start: torch.dtype = start) -> Iterator[None]:
            with _default_dtype(start):
                yield

        _exit_both_ways(
            target,
            "PREC-5",
            "module_init_context()",
            "the default dtype",
            precision.module_init_context,
            torch.get_default_dtype,
            arrange,
            snippet(
                target,
                f"""
                torch.set_default_dtype({start})
                try:
                    with p.module_init_context():
                        raise RuntimeError
                except RuntimeError:
                    pass
                print(torch.get_default_dtype())  # expected {start}
                """,
                var="p",
            ),
        )


@check("PREC-5", "precision")
def check_precision_forward_context_restores_default_dtype(target: _Target) -> None:
    """forward_context restores the default dtype on exit, even when the body raises."""
    precision, _ = _ready(target)
    for start in (torch.float32, torch.float64):

        def arrange(start: torch.dtype = start) -> Iterator[None]:
            with _default_dtype(start):
                yield

        _exit_both_ways(
            target,
            "PREC-5",
            "forward_context()",
            "the default dtype",
            precision.forward_context,
            torch.get_default_dtype,
            arrange,
            snippet(
                target,
                f"""
                torch.set_default_dtype({start})
                try:
                    with p.forward_context():
                        raise RuntimeError
                except RuntimeError:
                    pass
                print(torch.get_default_dtype())  # expected {start}
                """,
                var="p",
            ),
        )


@contextmanager
def _restoring_autocast(device: torch.device) -> Iterator[None]:
    """Put every device type's autocast state back afterwards, so that a leaking precision
    does not break the checks that run after this one."""
    kinds = [k for k in dict.fromkeys(("cpu", "cuda", device.type)) if k != "meta"]
    saved = [(k, torch.is_autocast_enabled(k), torch.get_autocast_dtype(k)) for k in kinds]
    cache = torch.is_autocast_cache_enabled()
    try:
        yield
    finally:
        for kind, enabled, dtype in saved:
            torch.set_autocast_enabled(kind, enabled)
            torch.set_autocast_dtype(kind, dtype)
        torch.set_autocast_cache_enabled(cache)


def _autocast_state(device: torch.device) -> dict[str, object]:
    state: dict[str, object] = {"cache_enabled": torch.is_autocast_cache_enabled()}
    for kind in dict.fromkeys(("cpu", "cuda", device.type)):
        try:
            state[kind] = (torch.is_autocast_enabled(kind), torch.get_autocast_dtype(kind))
        except RuntimeError:  # a device type without autocast (meta)
            continue
    return state


@check("PREC-6", "precision")
def check_precision_forward_context_restores_autocast_state(target: _Target) -> None:
    """forward_context restores the autocast state, even when the body raises.

    forward_context restores every device type's autocast state on exit, even when the body
    raises, also when an outer autocast is active.
    """
    precision, device = _ready(target)

    def plain() -> Iterator[None]:
        yield

    def outer_autocast() -> Iterator[None]:
        with torch.autocast("cpu", dtype=torch.bfloat16, cache_enabled=False):
            yield

    for arrange, label in ((plain, "no outer autocast"), (outer_autocast, "outer cpu autocast")):
        with _restoring_autocast(device):
            _exit_both_ways(
                target,
                "PREC-6",
                f"forward_context() ({label})",
                "every device type's autocast state",
                precision.forward_context,
                lambda: _autocast_state(device),
                arrange,
                snippet(
                    target,
                    f"""
                    p.setup(torch.device({str(device)!r}))
                    try:
                        with p.forward_context():
                            raise RuntimeError
                    except RuntimeError:
                        pass
                    print(torch.is_autocast_enabled({device.type!r}),
                          torch.get_autocast_dtype({device.type!r}))
                    """,
                    var="p",
                ),
            )
