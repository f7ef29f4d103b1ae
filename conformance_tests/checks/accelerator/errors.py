"""ERR-1: the accelerator's errors are trainspec errors that name the valid choices and
survive pickling."""

from __future__ import annotations

from typing import TYPE_CHECKING

from trainspec.conformance._helpers import describe_exception, describe_value, failure, snippet
from trainspec.conformance.core import check

if TYPE_CHECKING:
    from trainspec.conformance.checks.accelerator._fixtures import _Target


@check("ERR-1", "accelerator")
def check_accelerator_errors_are_trainspec_errors_that_survive_pickling(target: _Target) -> None:
    """Errors for bad input are trainspec errors with a message, and survive pickling.

    A malformed device request raises a ``TrainspecError`` subclass with a non-empty message,
    and the error pickles and unpickles to the same type and message (errors cross process
    boundaries in launchers and the distributed harness). The kit checks types and the round
    trip, never message wording.
    """
    import pickle

    from trainspec.errors import TrainspecError

    acc = target.make()
    repro = snippet(
        target,
        "import pickle\ntry:\n    acc.parse_devices(0)\nexcept Exception as e:\n"
        "    print(type(e), pickle.loads(pickle.dumps(e)))",
        var="acc",
    )
    try:
        acc.parse_devices(0)
    except TrainspecError as error:
        raised: TrainspecError = error
    except Exception as error:
        raise failure(
            target,
            "ERR-1",
            expected="raise a trainspec.TrainspecError subclass for the bad request devices=0",
            actual=describe_exception(error),
            hint="Raise ConfigurationError (trainspec.errors) naming the valid range.",
            snippet=repro,
        ) from error
    else:
        raise failure(
            target,
            "ERR-1",
            expected="raise a trainspec.TrainspecError subclass for the bad request devices=0",
            actual="parse_devices(0) returned normally",
            snippet=repro,
        )
    if not str(raised).strip():
        raise failure(
            target,
            "ERR-1",
            expected="give its error a message naming the value and the valid choices",
            actual=f"{type(raised).__name__} with an empty message",
            snippet=repro,
        )
    try:
        copy = pickle.loads(pickle.dumps(raised))
    except Exception as error:
        raise failure(
            target,
            "ERR-1",
            expected="raise errors that survive a pickle round trip",
            actual=f"{type(raised).__name__} does not round-trip: {describe_exception(error)}",
            hint="Keep the error's __init__ compatible with its args, or define __reduce__.",
            snippet=repro,
        ) from error
    if type(copy) is not type(raised) or str(copy) != str(raised):
        raise failure(
            target,
            "ERR-1",
            expected="raise errors whose type and message survive a pickle round trip",
            actual=f"{describe_value(raised)} came back as {describe_value(copy)}",
            snippet=repro,
        )
