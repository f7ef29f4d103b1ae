"""Hostile configuration input: hypothesis strategies, the fuzz targets and the rule.

Shared by ``tests/reliability/test_fuzz_configuration.py`` (a bounded, derandomized run in CI)
and ``scripts/fuzz_configuration.py`` (10,000 examples per target and a table of findings).
Both load this file by path under :data:`MODULE_NAME`, so the command-line fuzzing can name the
tiny targets below as ``trainspec_tests_fuzz_inputs:NotAPrecision``.

The rule, checked for every generated call (:func:`check_call`):

1. the call returns (and what it returns satisfies the protocol's stated invariants), or raises
   one of the target's allowed :class:`trainspec.TrainspecError` subclasses
   (:class:`~trainspec.ConfigurationError` for bad input; :class:`~trainspec.DeviceUnavailableError`
   where a well-formed request asks for hardware that is not here) — never a ``TypeError``,
   ``ValueError``, ``OverflowError``, ``OSError`` ... from deep inside;
2. the message is non-empty and names at least one valid choice for the argument in question:
   one entry of the target's *vocabulary* must appear in it once every echo of the given value
   (its ``repr``) is removed, so a message does not pass by quoting the bad input back;
3. the call returns within the watchdog's deadline (:func:`watchdog`); a hang is a failure.

The command line is held to its own rule: ``main(argv)`` returns 0, 1 or 2 and lets no
exception escape; a usage error (2) is one ``trainspec ...: error: ...`` line on standard error
(or the help, on either stream, when no command was given).

Known bugs are data (:data:`KNOWN_BUGS`): a finding that matches one is counted, not failed,
by the fuzz tests; each has a reproducer that the tests run as a strict ``xfail``, so a fix
turns it into an XPASS and the entry must be deleted.

Out of scope: objects whose ``__eq__``, ``__hash__`` or ``__repr__`` raise (not configuration
input); the ``TypeError`` that CKPT-1/CKPT-5 specify for unsupported storage options.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import io
import math
import os
import re
import signal
import sys
import tempfile
import threading
import time
import traceback
import warnings
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping, Sequence
from decimal import Decimal
from fractions import Fraction
from types import MappingProxyType
from typing import Final

import torch
from hypothesis import strategies as st

from trainspec import (
    Accelerator,
    CheckpointIO,
    ClusterEnvironment,
    ConfigurationError,
    DeviceUnavailableError,
    Precision,
    Strategy,
    TrainspecError,
)
from trainspec.conformance import core
from trainspec.reference import accelerators as acc
from trainspec.reference import checkpoint_io as cio
from trainspec.reference import cluster_environments as envs
from trainspec.reference import precisions as prec
from trainspec.reference.accelerators.device_request import parse_device_request
from trainspec.reference.connector import resolve
from trainspec.reference.registry import default_registry
from trainspec.types import PRECISION_FLAGS

try:  # numpy values are what users pass by accident (np.int64(2), an index array)
    import numpy as np
except ImportError:  # pragma: no cover - numpy ships with torch's usual installs
    np = None  # type: ignore[assignment]

MODULE_NAME: Final = "trainspec_tests_fuzz_inputs"
"""The name both the tests and the script load this file under (``sys.modules``)."""

CI_TIMEOUT_S: Final = 20.0
"""Watchdog deadline per call in the CI tests: generous, the CI machine is shared."""

# ---------------------------------------------------------------------------------------------
# The watchdog


class Hang(BaseException):
    """Raised into the main thread by :func:`watchdog` when a call overruns its deadline.

    A ``BaseException`` so that no ``except Exception`` in the code under test swallows it.
    """


def _raise_hang(signum: int, frame: object) -> None:
    raise Hang("the call did not return within the watchdog's deadline")


@contextlib.contextmanager
def watchdog(seconds: float) -> Iterator[None]:
    """Raise :class:`Hang` in the main thread if the body runs longer than ``seconds``.

    Uses ``SIGALRM`` (interrupts blocking lock waits and sleeps too). The previous handler and
    the previous timer (pytest-timeout's, for one) are restored afterwards, less the time spent.
    Off the main thread, or without ``SIGALRM``, the body runs unguarded and an overrun is
    reported after the fact by :func:`check_call`.
    """
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "SIGALRM"):
        yield
        return
    previous_handler = signal.signal(signal.SIGALRM, _raise_hang)
    previous_delay, previous_interval = signal.setitimer(signal.ITIMER_REAL, seconds)
    start = time.monotonic()
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous_handler)
        if previous_delay > 0:
            left = max(previous_delay - (time.monotonic() - start), 0.001)
            signal.setitimer(signal.ITIMER_REAL, left, previous_interval)


# ---------------------------------------------------------------------------------------------
# Hostile values

HUGE_INT: Final = 10**4400
"""More digits than ``sys.get_int_max_str_digits()`` (4300): ``repr`` and ``str`` of it raise."""

REGISTRY: Final = default_registry()
ACCELERATOR_NAMES: Final = tuple(REGISTRY.names("accelerator"))
STRATEGY_NAMES: Final = tuple(REGISTRY.names("strategy"))
PRECISION_NAMES: Final = tuple(REGISTRY.names("precision"))
CHECKPOINT_IO_NAMES: Final = tuple(REGISTRY.names("checkpoint_io"))
ENVIRONMENT_NAMES: Final = tuple(REGISTRY.names("cluster_environment"))

WHITESPACE: Final = (" ", "\t", "\n", "\r", "\x0b", "\x0c", "\u00a0", "\u2003", "\u3000")
INVISIBLE: Final = ("\u200b", "\ufeff", "\u00ad")
LOOKALIKES: Final = {"c": "\u0441", "p": "\u0440", "a": "\u0430", "o": "\u043e", "e": "\u0435"}

SPECIAL_STRINGS: Final = (
    "", "auto", "AUTO", " auto ", "Auto", "auto,", "none", "None", "null", "true", "false",
    "0", "1", "2", "3", "-1", "-2", "+1", " 1 ", "01", "1_0", "0x1", "1e3", "1.0", "1.5",
    "nan", "inf", "-inf", "0,1", "1,0", "1,", ",", ",,", "0,,1", "0, 1", " 0 , 1 ,", "[0, 1]",
    "(0,)", "0 1", "0;1", "1,1", "-1,", "0,-1", "a,b", "0,a", "\uff11", "\u00b2", "\u0661",
    "\u09ea", "\u2163", "9" * 5000, "1," + "9" * 5000, "\U0001f680", "\uff43\uff50\uff55",
    "ddp,", "16_mixed", "cpu ", "CPU", "bf16", "16", "32", "64", "fp16", "half", "float32",
    "torch.float32", "cuda:0", "cpu:0", "cpu,cuda", "gpu", "tpu", "mps", "xpu", "meta", "hpu",
    "ddp_spawn", "deepspeed", "fsdp", "single-device", "localhost", "node[001-004]",
    "trainspec.reference.accelerators.cpu:CPUAccelerator", "%s", "{}", "{0}", "\\", "'", '"',
)  # fmt: skip


def _variants(name: str) -> list[str]:
    """Near misses of a valid name: case, padding, separators, truncation, lookalikes."""
    out = {
        name.upper(), name.title(), name.swapcase(), f"{name},", f",{name}", f"{name};",
        f"{name}:0", f"{name} {name}", f"'{name}'", f'"{name}"', name[:-1], name[1:],
        name + name[-1], name.replace("-", "_"), name.replace("_", "-"), name.replace("-", ""),
        name.replace("-", " "), f"{name}\x00", "".join(LOOKALIKES.get(c, c) for c in name),
        "".join(chr(ord(c) + 0xFEE0) if "!" <= c <= "~" else c for c in name),
    }  # fmt: skip
    out |= {f"{w}{name}" for w in WHITESPACE} | {f"{name}{w}" for w in WHITESPACE}
    out |= {f"{name}{z}" for z in INVISIBLE}
    return sorted(out - {name})


@functools.cache
def near_misses(names: tuple[str, ...]) -> st.SearchStrategy[str]:
    """Strings one small mistake away from a valid name (never the valid name itself)."""
    valid = set(names)
    pool = sorted({v for n in names for v in _variants(n)} - valid)
    return st.sampled_from(pool)


@functools.cache
def strings(names: tuple[str, ...] = ()) -> st.SearchStrategy[str]:
    """Arbitrary text (unicode, whitespace, control characters), special strings and near
    misses of ``names``."""
    choices: list[st.SearchStrategy[str]] = [
        st.text(max_size=24),
        st.sampled_from(SPECIAL_STRINGS),
        st.text(alphabet=st.sampled_from(WHITESPACE + INVISIBLE), max_size=4),
    ]
    if names:
        choices.append(near_misses(names))
    return st.one_of(choices)


@functools.cache
def integers() -> st.SearchStrategy[int]:
    """Any int: small, boundary (ports, int32/int64) and negative."""
    edges = (0, 1, 2, 3, -1, -2, 65535, 65536, 2**31 - 1, 2**31, 2**63, -(2**63), 10**18, 10**400)
    return st.one_of(st.integers(), st.sampled_from(edges))


@functools.cache
def huge_integers() -> st.SearchStrategy[int]:
    """:data:`HUGE_INT` and its negation (a repr-safe strategy: hypothesis never prints it)."""
    return st.sampled_from((1, -1)).map(lambda sign: sign * HUGE_INT)


@functools.cache
def floats() -> st.SearchStrategy[float]:
    """Any float, including nan, infinities, -0.0, subnormals and integral floats."""
    edges = (math.nan, math.inf, -math.inf, -0.0, 0.0, 1.0, 2.0, 1.5, -1.0, 1e308, 5e-324)
    return st.one_of(st.floats(), st.sampled_from(edges))


def _misc_numbers() -> list[object]:
    values: list[object] = [complex(1, 0), Decimal("2"), Decimal("NaN"), Fraction(2, 1)]
    values += [torch.tensor(2), torch.tensor([0, 1]), torch.tensor(float("nan"))]
    if np is not None:
        values += [np.int64(2), np.float64(2.0), np.float32("nan"), np.bool_(True)]
        values += [np.array(2), np.array([0, 1]), np.array(["cpu", "cpu"]), np.array([])]
    return values


class _Opaque:
    """An object of no protocol at all."""

    def __repr__(self) -> str:
        return "<opaque>"


class HalfAccelerator:
    """Has some Accelerator members but not all: fails the runtime protocol check."""

    device_type = "cpu"

    def is_available(self) -> bool:
        return True

    def parse_devices(self, devices: object) -> list[torch.device]:
        return [torch.device("cpu")]


def _oddities() -> list[object]:
    return [
        Ellipsis, NotImplemented, object, int, str, type, acc.CPUAccelerator, prec.Float32Precision,
        print, os, range(2), range(0), slice(0, 2), b"cpu", b"auto", b"2", b"0,1", bytearray(b"2"),
        memoryview(b"2"), torch.device("cpu"), torch.device("cuda", 0), torch.float32,
        torch.bfloat16, frozenset({"cpu"}), {"cpu": 1}, MappingProxyType({"devices": 2}),
    ]  # fmt: skip


@functools.cache
def component_instances() -> st.SearchStrategy[object]:
    """A fresh reference component of every kind (to put in the wrong slot), plus objects that
    implement no protocol or only part of one."""
    factories: list[Callable[[], object]] = [
        acc.CPUAccelerator,
        lambda: acc.CPUAccelerator(num_devices=1),
        acc.CUDAAccelerator,
        acc.XLAAccelerator,
        prec.Float32Precision,
        prec.Float16MixedPrecision,
        prec.BFloat16Precision,
        cio.TorchCheckpointIO,
        cio.MemoryCheckpointIO,
        envs.LocalEnvironment,
        envs.SLURMEnvironment,
        envs.TorchElasticEnvironment,
        _single_device_strategy,
        _Opaque,
        HalfAccelerator,
        lambda: (i for i in range(2)),
        lambda: iter([0, 1]),
    ]
    return st.sampled_from(factories).map(lambda factory: factory())


def _single_device_strategy() -> object:
    from trainspec.reference.strategies import SingleDeviceStrategy

    return SingleDeviceStrategy()


@functools.cache
def scalars(names: tuple[str, ...] = ()) -> st.SearchStrategy[object]:
    """One hostile non-container value (``names``: valid names to make near misses of)."""
    return st.one_of(
        st.none(),
        st.booleans(),
        integers(),
        huge_integers(),
        floats(),
        strings(names),
        st.binary(max_size=8),
        st.sampled_from(_misc_numbers()),
        st.sampled_from(_oddities()),
        component_instances(),
    )


@functools.cache
def hashables(names: tuple[str, ...] = ()) -> st.SearchStrategy[object]:
    """Hostile values that can be set members and dict keys."""
    return st.one_of(st.none(), st.booleans(), integers(), floats(), strings(names))


@functools.cache
def hostile_values(names: tuple[str, ...] = ()) -> st.SearchStrategy[object]:
    """Any hostile value: a scalar, or a list, tuple, set or dict of them (nested a little).

    Strategies are cached per ``names`` (building them is slow); pass a tuple."""
    leaves = scalars(names)

    def containers(children: st.SearchStrategy[object]) -> st.SearchStrategy[object]:
        return st.one_of(
            st.lists(children, max_size=4),
            st.lists(children, max_size=4).map(tuple),
            st.sets(hashables(names), max_size=3),
            st.frozensets(hashables(names), max_size=3),
            st.dictionaries(hashables(names), children, max_size=3),
        )

    return st.recursive(leaves, containers, max_leaves=6)


@functools.cache
def either(valid: tuple[object, ...], names: tuple[str, ...]) -> st.SearchStrategy[object]:
    """One of ``valid``, or a hostile value (near misses of ``names``)."""
    return st.one_of(st.sampled_from(valid), hostile_values(names))


# ---------------------------------------------------------------------------------------------
# Calls, findings and the rule


@dataclasses.dataclass(frozen=True)
class Call:
    """One generated call: what to run, what it may raise, and what its message must name.

    ``invoke`` performs the call and checks what it returns (raising :class:`BadResult` when
    a returned value breaks the protocol). ``echoed`` are the given values whose ``repr`` is
    removed from a message before the vocabulary is looked for.
    """

    target: str
    description: str
    invoke: Callable[[], object]
    allowed: tuple[type[BaseException], ...]
    vocabulary: tuple[str, ...]
    echoed: tuple[object, ...] = ()

    def __repr__(self) -> str:
        return self.description


class BadResult(AssertionError):
    """A call returned, but what it returned breaks the protocol's stated invariants."""


FINDING_KINDS: Final = (
    "raw exception",
    "wrong trainspec error",
    "empty message",
    "no valid choice named",
    "hang",
    "bad result",
)
"""Every ``Finding.kind``; a CLI exit that breaks its rule is a ``"bad result"``."""


@dataclasses.dataclass(frozen=True)
class Finding:
    """One violation of the rule, with what reproduces it."""

    target: str
    kind: str
    error_type: str
    message: str
    site: str
    reproducer: str

    @property
    def signature(self) -> tuple[str, str, str, str]:
        """What makes two findings the same bug: target, kind, error type and where raised."""
        return (self.target, self.kind, self.error_type, self.site)

    def report(self) -> str:
        first = self.message.strip().splitlines()[0] if self.message.strip() else "<empty>"
        return (
            f"[{self.target}] {self.kind}: {self.error_type} at {self.site}: {first[:300]}\n"
            f"    reproducer: {self.reproducer[:500]}"
        )


def _site(error: BaseException) -> str:
    frames = traceback.extract_tb(error.__traceback__)
    if not frames:
        return "?"
    last = frames[-1]
    return f"{os.path.basename(last.filename)}:{last.lineno}"


def _safe_repr(value: object) -> str:
    try:
        return repr(value)
    except Exception as error:  # HUGE_INT: repr raises ValueError
        return f"<{type(value).__name__} whose repr raises {type(error).__name__}>"


def _safe_str(error: BaseException) -> str:
    try:
        return str(error)
    except Exception as inner:
        return f"<str() of the error raised {type(inner).__name__}>"


def names_a_choice(message: str, vocabulary: Sequence[str], echoed: Sequence[object]) -> bool:
    """Whether ``message`` names a ``vocabulary`` entry outside the echoes of ``echoed``."""
    text = message
    echoes = {_safe_repr(v) for v in echoed if not isinstance(v, (bool, int, float))}
    for echo in sorted(echoes - set(vocabulary), key=len, reverse=True):  # 'auto' stays 'auto'
        if len(echo) >= 2:
            text = text.replace(echo, "\x00")
    return any(word in text for word in vocabulary)


def check_call(call: Call, *, timeout_s: float) -> Finding | None:
    """Run ``call`` under :func:`watchdog` and return what breaks the rule, or ``None``."""

    def finding(kind: str, error: BaseException | None, message: str) -> Finding:
        notes = getattr(error, "__notes__", None) or []
        return Finding(
            target=call.target,
            kind=kind,
            error_type="-" if error is None else type(error).__name__,
            message=message,
            site="-" if error is None else _site(error),
            reproducer=call.description + "".join(f" [{note}]" for note in notes),
        )

    start = time.monotonic()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # a warning is not a crash
            with watchdog(timeout_s):
                call.invoke()
    except Hang as error:
        return finding("hang", error, f"did not return within {timeout_s:g} s")
    except BadResult as error:
        return finding("bad result", error, _safe_str(error))
    except Exception as error:
        message = _safe_str(error)
        if not isinstance(error, TrainspecError):
            return finding("raw exception", error, message)
        if not isinstance(error, call.allowed):
            return finding("wrong trainspec error", error, message)
        if not message.strip():
            return finding("empty message", error, message)
        if not names_a_choice(message, call.vocabulary, call.echoed):
            return finding("no valid choice named", error, message)
        return None
    elapsed = time.monotonic() - start
    if elapsed > timeout_s:  # only reachable where the watchdog cannot run
        return finding("hang", None, f"returned after {elapsed:.1f} s")
    return None


# ---------------------------------------------------------------------------------------------
# Vocabularies: the valid choices a message must name at least one of

ACCELERATOR_VOCABULARY: Final = (*(repr(n) for n in ACCELERATOR_NAMES), "'auto'")
STRATEGY_VOCABULARY: Final = (*(repr(n) for n in STRATEGY_NAMES), "'auto'")
PRECISION_VOCABULARY: Final = tuple(PRECISION_FLAGS)
CHECKPOINT_IO_VOCABULARY: Final = tuple(repr(n) for n in CHECKPOINT_IO_NAMES)
ENVIRONMENT_VOCABULARY: Final = (*(repr(n) for n in ENVIRONMENT_NAMES), "torchrun", "srun")
"""Registered names, or the launchers that define the non-local environments ("ranks started
by torchrun or srun")."""
DEVICES_VOCABULARY: Final = ("'auto'", "no device of this type exists")
"""``describe_valid_requests``: ``'auto'`` is always valid where a device exists; where none
does, the message must say that there is no valid request."""
NUM_NODES_VOCABULARY: Final = ("positive int", "must be 1")
PLUGINS_VOCABULARY: Final = ("Precision", "CheckpointIO", "ClusterEnvironment", "give one")
SCALER_STATE_VOCABULARY: Final = (
    "scale", "growth_factor", "backoff_factor", "growth_interval", "growth_tracker", "{}",
)  # fmt: skip
"""A state message names the expected keys or the offending key with its valid range, or
``{}`` (the only state of a precision without one)."""
ENV_VARIABLE_VOCABULARY: Final = (
    "integer", "[0, ", "host name", "host list", "job id", "run id",
)  # fmt: skip
DEVICE_TYPE_VOCABULARY: Final = ("cpu", "'cuda'")


CONFIG_ONLY: Final[tuple[type[BaseException], ...]] = (ConfigurationError,)
CONFIG_OR_UNAVAILABLE: Final[tuple[type[BaseException], ...]] = (
    ConfigurationError,
    DeviceUnavailableError,
)


# ---------------------------------------------------------------------------------------------
# Target: resolve(...)

RESOLVE_ARGUMENTS: Final = (
    "accelerator", "strategy", "devices", "num_nodes", "precision", "checkpoint_io",
    "cluster_environment", "plugins",
)  # fmt: skip
RESOLVE_DEFAULTS: Final[Mapping[str, object]] = MappingProxyType(
    {
        "accelerator": "auto",
        "strategy": "auto",
        "devices": "auto",
        "num_nodes": 1,
        "precision": "32-true",
        "checkpoint_io": None,
        "cluster_environment": None,
        "plugins": (),
    }
)
RESOLVE_VOCABULARY: Final[Mapping[str, tuple[str, ...]]] = MappingProxyType(
    {
        "accelerator": ACCELERATOR_VOCABULARY,
        "strategy": STRATEGY_VOCABULARY,
        "devices": DEVICES_VOCABULARY,
        "num_nodes": NUM_NODES_VOCABULARY,
        "precision": PRECISION_VOCABULARY,
        "checkpoint_io": CHECKPOINT_IO_VOCABULARY,
        "cluster_environment": ENVIRONMENT_VOCABULARY,
        "plugins": PLUGINS_VOCABULARY,
    }
)


def _is_device_request(value: object) -> bool:
    try:
        parse_device_request(value, device_type="cpu", available=1 << 20, auto_count=1)
    except Exception:
        return False
    return True


def _is_name(value: object, names: Sequence[str]) -> bool:
    return isinstance(value, str) and value in names


def resolve_argument_is_valid(argument: str, value: object) -> bool:
    """Whether ``value`` is, on its own, a valid choice for ``resolve``'s ``argument``."""
    if argument == "accelerator":
        return _is_name(value, (*ACCELERATOR_NAMES, "auto")) or isinstance(value, Accelerator)
    if argument == "strategy":
        return _is_name(value, (*STRATEGY_NAMES, "auto")) or isinstance(value, Strategy)
    if argument == "devices":
        return _is_device_request(value)
    if argument == "num_nodes":
        return type(value) is int and value >= 1
    if argument == "precision":
        return _is_name(value, PRECISION_NAMES) or isinstance(value, Precision)
    if argument == "checkpoint_io":
        return (
            value is None or _is_name(value, CHECKPOINT_IO_NAMES) or isinstance(value, CheckpointIO)
        )
    if argument == "cluster_environment":
        return (
            value is None
            or _is_name(value, ENVIRONMENT_NAMES)
            or isinstance(value, ClusterEnvironment)
        )
    if argument == "plugins":
        return isinstance(value, (list, tuple)) and all(
            isinstance(p, (Precision, CheckpointIO, ClusterEnvironment)) for p in value
        )
    raise KeyError(argument)


def _fresh(factory: Callable[[], object]) -> st.SearchStrategy[object]:
    return st.just(factory).map(lambda f: f())


@functools.cache
def _valid_resolve_values(argument: str) -> st.SearchStrategy[object]:
    if argument == "accelerator":
        return st.one_of(st.sampled_from((*ACCELERATOR_NAMES, "auto")), _fresh(acc.CPUAccelerator))
    if argument == "strategy":
        return st.sampled_from((*STRATEGY_NAMES, "auto"))
    if argument == "devices":
        return st.sampled_from((1, 2, 3, -1, "auto", "1", "-1", "0,", "0,1", [0], [0, 1], (1,)))
    if argument == "num_nodes":
        return st.sampled_from((1, 2))
    if argument == "precision":
        return st.one_of(st.sampled_from(PRECISION_NAMES), _fresh(prec.BFloat16MixedPrecision))
    if argument == "checkpoint_io":
        return st.one_of(
            st.sampled_from((None, *CHECKPOINT_IO_NAMES)), _fresh(cio.MemoryCheckpointIO)
        )
    if argument == "cluster_environment":
        return st.one_of(st.sampled_from((None, *ENVIRONMENT_NAMES)), _fresh(envs.LocalEnvironment))
    if argument == "plugins":
        return st.sampled_from(((), [])) | st.lists(
            st.sampled_from((prec.Float16Precision, cio.TorchCheckpointIO)).map(lambda f: f()),
            max_size=2,
        )
    raise KeyError(argument)


@functools.cache
def _hostile_resolve_values(argument: str) -> st.SearchStrategy[object]:
    names = {
        "accelerator": (*ACCELERATOR_NAMES, "auto"),
        "strategy": (*STRATEGY_NAMES, "auto"),
        "devices": ("auto", "-1", "0,1"),
        "num_nodes": ("1",),
        "precision": PRECISION_NAMES,
        "checkpoint_io": CHECKPOINT_IO_NAMES,
        "cluster_environment": ENVIRONMENT_NAMES,
        "plugins": (),
    }[argument]
    return hostile_values(names)


def resolve_call(**kwargs: object) -> Call:
    """``resolve(**kwargs)`` as a :class:`Call`.

    The argument in question may be any one, given or not: resolve checks them in its own
    order, a valid name can still fail (an accelerator that is not here) and a combination can
    fail on a default (the detected environment). So the message must name a valid choice of
    some argument of ``resolve``; echoes of the invalid values given do not count.
    """
    vocabulary = tuple(word for a in RESOLVE_ARGUMENTS for word in RESOLVE_VOCABULARY[a])
    echoed = tuple(v for a, v in kwargs.items() if not resolve_argument_is_valid(a, v))
    description = "resolve(" + ", ".join(f"{k}={_safe_repr(v)}" for k, v in kwargs.items()) + ")"

    def invoke() -> object:
        built = resolve(**kwargs)  # type: ignore[arg-type]
        if not isinstance(built, Strategy):
            raise BadResult(f"resolve() returned {type(built).__name__}, not a Strategy")
        return built

    return Call("resolve", description, invoke, CONFIG_OR_UNAVAILABLE, vocabulary, echoed)


@st.composite
def resolve_calls(draw: st.DrawFn) -> Call:
    """``resolve(**kwargs)`` where each argument is left out, valid, or hostile (at least one
    argument is given; most examples have one or two hostile arguments)."""
    kwargs: dict[str, object] = {}
    for argument in RESOLVE_ARGUMENTS:
        how = draw(st.sampled_from(("default", "default", "valid", "hostile")))
        if how == "valid":
            kwargs[argument] = draw(_valid_resolve_values(argument))
        elif how == "hostile":
            kwargs[argument] = draw(_hostile_resolve_values(argument))
    if not kwargs:
        argument = draw(st.sampled_from(RESOLVE_ARGUMENTS))
        kwargs[argument] = draw(_hostile_resolve_values(argument))
    return resolve_call(**kwargs)


# ---------------------------------------------------------------------------------------------
# Target: Accelerator.parse_devices(x) and the accelerator constructors

ACCELERATOR_FACTORIES: Final[Mapping[str, Callable[[], Accelerator]]] = MappingProxyType(
    {
        "CPUAccelerator()": acc.CPUAccelerator,
        "CPUAccelerator(num_devices=1)": lambda: acc.CPUAccelerator(num_devices=1),
        "CPUAccelerator(num_devices=8)": lambda: acc.CPUAccelerator(num_devices=8),
        "CUDAAccelerator()": acc.CUDAAccelerator,
        "XLAAccelerator()": acc.XLAAccelerator,
        "TorchDeviceAccelerator('cpu')": lambda: acc.TorchDeviceAccelerator("cpu"),
        "TorchDeviceAccelerator('meta')": lambda: acc.TorchDeviceAccelerator("meta"),
    }
)

DEVICE_REQUEST_NAMES: Final = ("auto", "-1", "0,1", "1,", "2")


@functools.cache
def device_requests() -> st.SearchStrategy[object]:
    """Well-formed device requests and hostile ones."""
    valid = st.one_of(
        st.integers(min_value=-1, max_value=9).filter(lambda n: n != 0),
        st.sampled_from(DEVICE_REQUEST_NAMES),
        st.lists(st.integers(min_value=0, max_value=9), min_size=1, max_size=4, unique=True),
    )
    return st.one_of(valid, hostile_values(DEVICE_REQUEST_NAMES))


def _check_parsed(accelerator: Accelerator, parsed: object) -> None:
    if not isinstance(parsed, list) or not parsed:
        raise BadResult(f"parse_devices returned {parsed!r}; expected a non-empty list")
    for device in parsed:
        if not isinstance(device, torch.device) or device.type != accelerator.device_type:
            raise BadResult(
                f"parse_devices returned {parsed!r}; expected {accelerator.device_type} devices"
            )
    if len(parsed) > max(accelerator.device_count(), 1) and accelerator.device_type != "cpu":
        raise BadResult(
            f"parse_devices returned {len(parsed)} devices; {accelerator.device_count()} exist"
        )


def parse_devices_call(accelerator: str, devices: object) -> Call:
    """``ACCELERATOR_FACTORIES[accelerator]().parse_devices(devices)`` as a :class:`Call`."""

    def invoke() -> object:
        built = ACCELERATOR_FACTORIES[accelerator]()
        parsed = built.parse_devices(devices)  # type: ignore[arg-type]
        _check_parsed(built, parsed)
        return parsed

    description = f"{accelerator}.parse_devices({_safe_repr(devices)})"
    return Call(
        "parse_devices", description, invoke, CONFIG_OR_UNAVAILABLE, DEVICES_VOCABULARY, (devices,)
    )


@st.composite
def parse_devices_calls(draw: st.DrawFn) -> Call:
    """Every reference accelerator's ``parse_devices`` with any request."""
    return parse_devices_call(
        draw(st.sampled_from(sorted(ACCELERATOR_FACTORIES))), draw(device_requests())
    )


def accelerator_init_call(which: str, value: object) -> Call:
    """``CPUAccelerator(num_devices=value)`` or ``TorchDeviceAccelerator(value)``."""
    if which == "CPUAccelerator":

        def invoke() -> object:
            built = acc.CPUAccelerator(num_devices=value)  # type: ignore[arg-type]
            if built.device_count() < 1:
                raise BadResult(f"device_count() is {built.device_count()}")
            return built

        return Call(
            "accelerator_init", f"CPUAccelerator(num_devices={_safe_repr(value)})", invoke,
            CONFIG_ONLY, NUM_NODES_VOCABULARY, (value,),
        )  # fmt: skip

    def invoke_generic() -> object:
        built = acc.TorchDeviceAccelerator(value)  # type: ignore[arg-type]
        built.is_available()
        return built

    return Call(
        "accelerator_init", f"TorchDeviceAccelerator({_safe_repr(value)})", invoke_generic,
        CONFIG_ONLY, DEVICE_TYPE_VOCABULARY, (value,),
    )  # fmt: skip


@st.composite
def accelerator_init_calls(draw: st.DrawFn) -> Call:
    """``CPUAccelerator(num_devices=x)`` and ``TorchDeviceAccelerator(x)``."""
    which = draw(st.sampled_from(("CPUAccelerator", "TorchDeviceAccelerator")))
    if which == "CPUAccelerator":
        return accelerator_init_call(which, draw(either((1, 2, 8, 64), ("1",))))
    return accelerator_init_call(
        which, draw(either(("cpu", "cuda", "meta", "xla", "mps"), ("cuda", "cpu")))
    )


# ---------------------------------------------------------------------------------------------
# Target: precision_for_flag(x) and Precision.load_state_dict(state)


def precision_flag_call(flag: object) -> Call:
    """``precision_for_flag(flag)`` as a :class:`Call`."""

    def invoke() -> object:
        built = prec.precision_for_flag(flag)  # type: ignore[arg-type]
        if not isinstance(built, Precision):
            raise BadResult(f"precision_for_flag returned {type(built).__name__}")
        return built

    return Call(
        "precision_for_flag", f"precision_for_flag({_safe_repr(flag)})", invoke, CONFIG_ONLY,
        PRECISION_VOCABULARY, (flag,),
    )  # fmt: skip


@st.composite
def precision_flag_calls(draw: st.DrawFn) -> Call:
    """``precision_for_flag`` with every flag, near misses and hostile values."""
    return precision_flag_call(draw(either(tuple(PRECISION_FLAGS), tuple(PRECISION_FLAGS))))


SCALER_FIELDS: Final = (
    "scale",
    "growth_factor",
    "backoff_factor",
    "growth_interval",
    "growth_tracker",
)
PRECISION_CLASSES: Final[Mapping[str, Callable[[], Precision]]] = MappingProxyType(
    {cls.__name__: cls for cls in prec.PRECISION_CLASSES.values()}
)


@functools.cache
def _scaler_values() -> st.SearchStrategy[object]:
    plausible = st.sampled_from((0, 1, 2, 10, 2000, 1999, 0.5, 2.0, 65536.0, 1.0, -1, 0.0))
    return st.one_of(plausible, integers(), floats(), scalars(()))


@functools.cache
def _scaler_extra_keys() -> st.SearchStrategy[dict[object, object]]:
    return st.dictionaries(hashables(SCALER_FIELDS), scalars(), max_size=1)


@functools.cache
def _arbitrary_mappings() -> st.SearchStrategy[dict[object, object]]:
    return st.dictionaries(hashables(SCALER_FIELDS), hostile_values(), max_size=6)


@st.composite
def scaler_states(draw: st.DrawFn) -> object:
    """Mappings near a valid loss-scaler state, arbitrary mappings and non-mappings."""
    how = draw(st.sampled_from(("near", "near", "valid", "arbitrary", "not a mapping", "empty")))
    if how == "valid":
        interval = draw(st.integers(min_value=1, max_value=5000))
        return {
            "scale": draw(st.floats(min_value=1e-30, max_value=1e30)),
            "growth_factor": draw(st.floats(min_value=1.0001, max_value=100)),
            "backoff_factor": draw(st.floats(min_value=0.0001, max_value=0.9999)),
            "growth_interval": interval,
            "growth_tracker": draw(st.integers(min_value=0, max_value=interval - 1)),
        }
    if how == "near":
        state: dict[object, object] = {k: draw(_scaler_values()) for k in SCALER_FIELDS}
        for key in draw(st.sets(st.sampled_from(SCALER_FIELDS), max_size=2)):
            del state[key]
        extra = draw(_scaler_extra_keys())
        state.update(extra)
        wrapper = draw(st.sampled_from((dict, OrderedDict, MappingProxyType)))
        return wrapper(state)
    if how == "arbitrary":
        return draw(_arbitrary_mappings())
    if how == "empty":
        return draw(st.sampled_from(({}, OrderedDict(), MappingProxyType({}))))
    return draw(hostile_values(SCALER_FIELDS))


def precision_state_call(precision: str, state: object) -> Call:
    """``PRECISION_CLASSES[precision]().load_state_dict(state)``, then ``state_dict()``."""

    def invoke() -> object:
        built = PRECISION_CLASSES[precision]()
        built.load_state_dict(state)  # type: ignore[arg-type]
        after = built.state_dict()
        if after and set(after) != set(SCALER_FIELDS):
            raise BadResult(f"state_dict() after a successful load is {after!r}")
        if after and isinstance(state, Mapping) and after["scale"] != float(state["scale"]):
            raise BadResult(f"the loaded scale {state['scale']!r} reads back as {after['scale']!r}")
        return after

    return Call(
        "precision_load_state_dict", f"{precision}().load_state_dict({_safe_repr(state)})",
        invoke, CONFIG_ONLY, SCALER_STATE_VOCABULARY, (state,),
    )  # fmt: skip


@st.composite
def precision_state_calls(draw: st.DrawFn) -> Call:
    """Every reference precision's ``load_state_dict`` with near-valid and hostile states."""
    return precision_state_call(
        draw(st.sampled_from(sorted(PRECISION_CLASSES))), draw(scaler_states())
    )


# ---------------------------------------------------------------------------------------------
# Target: cluster environments under arbitrary environment variables

ENV_VARIABLES: Final = (
    "RANK", "WORLD_SIZE", "LOCAL_RANK", "NODE_RANK", "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT",
    "TORCHELASTIC_RUN_ID", "SLURM_NTASKS", "SLURM_PROCID", "SLURM_LOCALID", "SLURM_NODEID",
    "SLURM_NODELIST", "SLURM_JOB_NODELIST", "SLURM_JOB_ID", "SLURM_JOB_NAME",
)  # fmt: skip
ENV_SCENARIOS: Final[tuple[Mapping[str, str], ...]] = (
    {},
    {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "NODE_RANK": "0",
     "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"},
    {"TORCHELASTIC_RUN_ID": "none", "RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1",
     "GROUP_RANK": "0", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"},
    {"SLURM_NTASKS": "4", "SLURM_PROCID": "3", "SLURM_LOCALID": "1", "SLURM_NODEID": "1",
     "SLURM_NODELIST": "node[001-002]", "SLURM_JOB_ID": "123456", "SLURM_JOB_NAME": "train"},
)  # fmt: skip
ENV_NUMBERS: Final = (
    "0", "1", "2", "3", "-1", "00", "+1", " 2 ", "1_0", "1.0", "0x10", "1e3", "", " ", "65535",
    "65536", "9" * 5000, "\u00b2", "\u00b9", "\u2460", "\u00bd", "\u0661", "\u0661\u0662",
    "\u0967", "\uff19", "\U0001d7cf", "7\u00b2", "\u00b2\u00b3", "123\u2460", "12\u00b2",
)  # fmt: skip
"""Integers as they may appear in variables: signs, padding, underscores, other bases, huge, and
unicode digits (``int()`` takes ``'\u0661'``; ``str.isdigit()`` is true for ``'\u00b2'``)."""
ENV_HOSTS: Final = (
    "127.0.0.1", "::1", "localhost", "LOCALHOST", "node001", "no-such-host.invalid",
    "256.0.0.1", "[::1]", "127.0.0.1:29500", "10.255.255.1", "x y", "", " ", "h\u00e9te",
)  # fmt: skip
ENV_NODELISTS: Final = (
    "node[001-004,007]", "n[1-2]", "a,b", "[", "]", "n[2-1]", "node[01-", "n[1-2][3-4]",
    "n[[1]]", "n]1[", "n[a-b]", ",", "n[1-2],", "n[" + "9" * 5000 + "]",
    "n[1-" + "9" * 5000 + "]", "n[\u0661-\u0662]", "n[\u00b2]", "n[1-\u00b2]", "", " ",
)  # fmt: skip
ENV_POOLS: Final[Mapping[str, tuple[str, ...]]] = MappingProxyType(
    {
        **{name: ENV_HOSTS for name in ("MASTER_ADDR",)},
        **{name: ENV_NODELISTS for name in ("SLURM_NODELIST", "SLURM_JOB_NODELIST")},
        "SLURM_JOB_NAME": ("bash", "interactive", "train", "", "Bash"),
        "TORCHELASTIC_RUN_ID": ("none", "", "abc"),
    }
)


@functools.cache
def env_values(name: str = "") -> st.SearchStrategy[str]:
    """Values for variable ``name`` (its own pool: numbers, hosts or node lists), or any
    string an environment variable can hold (no NUL: ``os.environ`` refuses it)."""
    pool = ENV_POOLS.get(name, ENV_NUMBERS)
    return st.one_of(
        st.sampled_from(pool),
        st.sampled_from(pool),
        st.integers(min_value=-3, max_value=70000).map(str),
        strings(("0", "1", "node1")),
    ).filter(lambda s: "\x00" not in s)


ENVIRONMENT_CLASSES: Final = ("LocalEnvironment", "TorchElasticEnvironment", "SLURMEnvironment")
ENV_MEMBERS: Final = (
    "detect", "creates_processes_externally", "main_address", "main_port", "world_size",
    "global_rank", "local_rank", "node_rank", "validate", "teardown",
)  # fmt: skip


@contextlib.contextmanager
def environment_variables(values: Mapping[str, str | None]) -> Iterator[None]:
    """Set (or, for ``None``, delete) variables; restore ``os.environ`` exactly afterwards."""
    saved = dict(os.environ)
    try:
        for name in ENV_VARIABLES:
            os.environ.pop(name, None)
        for name, value in values.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def _check_member(member: str, value: object) -> None:
    """The invariants ENV-1 ... ENV-4 state for what a member returns."""
    ok = True
    if member in ("detect", "creates_processes_externally"):
        ok = isinstance(value, bool)
    elif member == "main_address":
        ok = isinstance(value, str) and bool(value) and not any(c.isspace() for c in value)
    elif member == "main_port":
        ok = type(value) is int and 1 <= value <= 65535
    elif member == "world_size":
        ok = type(value) is int and value >= 1
    elif member in ("global_rank", "local_rank", "node_rank"):
        ok = type(value) is int and value >= 0
    if not ok:
        raise BadResult(f"{member} returned {value!r}, which breaks ENV-1..4")


@functools.cache
def _env_mutations() -> st.SearchStrategy[list[tuple[str, str | None]]]:
    change = st.sampled_from(ENV_VARIABLES).flatmap(
        lambda name: st.tuples(st.just(name), st.none() | env_values(name))
    )
    return st.lists(change, max_size=4)


def _read_members(environment: ClusterEnvironment) -> None:
    """Read every member in turn. A ConfigurationError naming a valid choice is the allowed
    outcome of one member and the next is read; anything else propagates (with the member in
    a note) for :func:`check_call` to judge."""
    _check_member("detect", environment.detect())
    for member in ENV_MEMBERS:
        try:
            attribute = getattr(environment, member)
            value = attribute() if callable(attribute) else attribute
            _check_member(member, value)
        except ConfigurationError as error:
            text = _safe_str(error)
            if text.strip() and names_a_choice(text, ENV_VARIABLE_VOCABULARY, ()):
                continue
            error.add_note(f"raised by .{member}")
            raise
        except BaseException as error:
            error.add_note(f"raised by .{member}")
            raise
        if member == "validate":  # after a clean validate, the ranks must be consistent
            rank, local, world = (
                environment.global_rank, environment.local_rank, environment.world_size,
            )  # fmt: skip
            if not 0 <= local <= rank < world:
                raise BadResult(
                    f"validate() passed but local_rank={local}, global_rank={rank}, "
                    f"world_size={world} break ENV-4"
                )


def environment_call(variables: Mapping[str, str | None], which: str, **kwargs: object) -> Call:
    """Under ``variables``, build ``which`` (an environment class name, or
    ``"detect_environment"``) and read every member (see :func:`_read_members`)."""

    def invoke() -> object:
        with environment_variables(variables):
            if which == "detect_environment":
                environment: ClusterEnvironment = envs.detect_environment()
            else:
                environment = getattr(envs, which)(**kwargs)
            _read_members(environment)
            return environment

    shown = {
        k: v if v is None or len(v) < 60 else f"{v[:20]}...({len(v)} chars)"
        for k, v in variables.items()
    }
    args = ", ".join(f"{k}={_safe_repr(v)}" for k, v in kwargs.items())
    call = f"{which}({args})" if which != "detect_environment" else "detect_environment()"
    description = f"with os.environ {shown}: every member of {call}"
    return Call(
        "environment", description, invoke, CONFIG_ONLY, ENV_VARIABLE_VOCABULARY,
        tuple(v for v in variables.values() if v is not None) + tuple(kwargs.values()),
    )  # fmt: skip


@st.composite
def environment_calls(draw: st.DrawFn) -> Call:
    """An environment (class or ``detect_environment()``) under a scenario with a few
    variables changed or removed."""
    variables: dict[str, str | None] = dict(draw(st.sampled_from(ENV_SCENARIOS)))
    variables.update(dict(draw(_env_mutations())))
    which = draw(st.sampled_from((*ENVIRONMENT_CLASSES, "detect_environment")))
    kwargs: dict[str, object] = {}
    if which == "LocalEnvironment" and draw(st.booleans()):
        kwargs["main_address"] = draw(either(ENV_HOSTS, ("localhost",)))
    if which == "LocalEnvironment" and draw(st.integers(0, 3)) == 0:
        kwargs["main_port"] = draw(either((1, 29500, 65535), ("29500",)))
    return environment_call(variables, which, **kwargs)


# ---------------------------------------------------------------------------------------------
# Target: the trainspec command line


class NotAPrecision:
    """A CLI target that fails the structure layer at once (no Precision member)."""


def factory_that_raises() -> object:
    """A CLI target whose factory raises: the structure layer reports it."""
    raise RuntimeError("this factory always fails")


NOT_CALLABLE: Final = 42
WRONG_KIND_TARGET: Final = core.Target(kind="accelerator", factory=NotAPrecision, name="wrong kind")

TINY_TARGETS: Final = (
    f"{MODULE_NAME}:NotAPrecision",
    f"{MODULE_NAME}:factory_that_raises",
    f"{MODULE_NAME}:NOT_CALLABLE",
    f"{MODULE_NAME}:WRONG_KIND_TARGET",
    f"{MODULE_NAME}:NotAPrecision.missing",
    f"{MODULE_NAME}:nothing_here",
    "json:dumps",
    "math:pi",
    "math:nothere",
    "trainspec_fuzz_no_such_module:Thing",
    ".relative:Thing",
    "no_colon_here",
    ":Thing",
    "json:",
    "trainspec.reference.precisions:__doc__",
)
"""``module:attribute`` targets that cannot start a long verification: missing modules and
attributes, non-callables, and factories that fail the structure layer at once."""

REAL_TINY_ARGV: Final = (
    "verify", "precision", "trainspec.reference.precisions:Float32Precision", "--select", "PREC-1",
)  # fmt: skip
"""A real, conforming target restricted to one fast clause: exercises the options that only
matter once checks run (``--timeout``, ``--json``, ``--junit``, ``--xfail``)."""

CLI_WORDS: Final = (
    "verify", "Verify", "verfy", "list", "--help", "-h", "--version", "--", "-", "--bogus", "-x",
    *core.KINDS, "Precision", "accelerators", "checkpoint-io", "--capability", "--xfail",
    "--select", "--layer", "--option", "--timeout", "--json", "--junit", "-q", "--quiet", "-v",
    "--verbose", "--timeout=nan", "--timeout=inf", "--timeout=-1", "--layer=structure",
    "--layer=behaviour", "--capability=autocast", "--xfail=PREC-1", "--xfail=PREC-1=why",
    "--select=PREC-1,", "--option=k=v", "--option==", "behaviour", "distributed", "end_to_end",
    "structure", "autocast", "gradient_scaling", "PREC-1", "PREC-99", "ACC-1", "ID=", "=why",
    "k=v", "nan", "inf", "-inf", "1e300", "1e-300", "0", "-1", "0x10", "report.json",
    "report.xml", "sub/report.json", ".", "--kind", "--kind=accelerator", "--kind=bogus",
    *TINY_TARGETS,
)  # fmt: skip


def _safe_token(token: str) -> bool:
    """Arguments that could write outside the sandbox directory or start a long run are out."""
    return not token.startswith(("/", "~")) and ".." not in token and token != "demo"


@functools.cache
def argv_lists() -> st.SearchStrategy[list[str]]:
    """Random argv: known words, tiny targets and arbitrary text, in any order; or the real
    tiny verification with random options."""
    token = st.one_of(st.sampled_from(CLI_WORDS), st.text(max_size=12)).filter(_safe_token)
    random_argv = st.lists(token, max_size=8)
    option = st.one_of(
        st.tuples(
            st.just("--timeout"),
            st.sampled_from(("0", "5", "nan", "inf", "1e300", "1e-300", "-0", "300")),
        ),
        st.tuples(
            st.sampled_from(("--json", "--junit")),
            st.sampled_from(("r.json", "sub/r.xml", ".", "", "r\x00.json")),
        ),
        st.tuples(st.just("--layer"), st.sampled_from(("behaviour", "distributed", "end_to_end"))),
        st.tuples(
            st.just("--xfail"), st.sampled_from(("PREC-1=known", "PREC-2=x", "nope", "PREC-1="))
        ),
        st.tuples(st.just("--capability"), st.sampled_from(("autocast", "nope", ""))),
        st.tuples(st.just("--option"), st.sampled_from(("k=v", "k", "=v"))),
        st.tuples(st.sampled_from(("-q", "-v"))),
    )
    real_argv = st.lists(option, max_size=3).map(
        lambda options: [*REAL_TINY_ARGV, *(part for o in options for part in o)]
    )
    return st.one_of(random_argv, random_argv, real_argv, demo_argv_lists())


DEMO_VALID: Final[Mapping[str, tuple[str, ...]]] = MappingProxyType(
    {
        "--accelerator": (*ACCELERATOR_NAMES, "auto"),
        "--strategy": (*STRATEGY_NAMES, "auto"),
        "--devices": ("1", "2", "-1", "auto", "0,1"),
        "--precision": PRECISION_NAMES,
        "--checkpoint-io": CHECKPOINT_IO_NAMES,
        "--steps": ("2", "4", "20"),
        "--batch-size": ("1", "16"),
        "--seed": ("0", "7"),
        "--checkpoint-dir": ("ckpt",),
    }
)
DEMO_INVALID_NUMBERS: Final[Mapping[str, tuple[str, ...]]] = MappingProxyType(
    {
        "--steps": ("1", "0", "-3", "x", "1.5", "", "1e3", "0x10", "9" * 5000),
        "--batch-size": ("0", "-1", "x", ""),
        "--seed": ("x", "1.5", ""),
    }
)


def _demo_devices(text: str) -> object:
    stripped = text.strip()
    return int(stripped) if re.fullmatch(r"-?[0-9]+", stripped) else stripped


def demo_value_is_invalid(option: str, value: str) -> bool:
    """Whether ``trainspec demo {option}={value}`` is refused before any training starts."""
    if option in DEMO_INVALID_NUMBERS:
        return value in DEMO_INVALID_NUMBERS[option]
    if option == "--devices":
        try:
            return not _is_device_request(_demo_devices(value))
        except ValueError:  # more digits than int() takes
            return True
    argument = {"--accelerator": "accelerator", "--strategy": "strategy",
                "--precision": "precision", "--checkpoint-io": "checkpoint_io"}[option]  # fmt: skip
    return not resolve_argument_is_valid(argument, value)


@functools.cache
def demo_argv_lists() -> st.SearchStrategy[list[str]]:
    """``trainspec demo`` with random options, always ending with one option whose value is
    refused before training (so no example trains a model or starts processes)."""
    valid = st.sampled_from(sorted(DEMO_VALID)).flatmap(
        lambda option: st.sampled_from(DEMO_VALID[option]).map(lambda v: [option, v])
    )
    flag = st.sampled_from((["--no-progress"], ["--bogus"], ["-x"]))
    prefix = st.lists(st.one_of(valid, flag), max_size=3)
    refusable = sorted(o for o in DEMO_VALID if o != "--checkpoint-dir")
    invalid = st.sampled_from(refusable).flatmap(
        lambda option: (
            (
                st.sampled_from(DEMO_INVALID_NUMBERS[option])
                if option in DEMO_INVALID_NUMBERS
                else strings(DEMO_VALID[option])
            )
            .filter(lambda value: demo_value_is_invalid(option, value))
            .map(lambda value: f"{option}={value}")
        )
    )
    return st.tuples(prefix, invalid).map(
        lambda parts: ["demo", *(token for pair in parts[0] for token in pair), parts[1]]
    )


# ---------------------------------------------------------------------------------------------
# ``trainspec demo`` with hostile numbers that reach training


def _demo_numbers(
    low: int, high: int, running: st.SearchStrategy[int], *, high_runs: bool = True
) -> st.SearchStrategy[str]:
    """An option's value as text: one that trains (``running``, inside ``low .. high``), the
    range's edges and just past them, or any int outside the range (huge and negative ones
    included). ``high_runs=False`` leaves ``high`` itself out (a run that long never ends)."""
    edges = (low, high, low - 1, high + 1, -(high + 1), 2 * high)
    edge = st.sampled_from(edges if high_runs else edges[:1] + edges[2:])
    outside = integers().filter(lambda v: not low <= v <= high)
    huge = st.sampled_from(("9" * 5000, "-" + "9" * 5000))  # str() of such an int raises
    return st.one_of(st.one_of(running, running, edge, outside).map(str), huge)


DEMO_RUN_ARGV: Final = (
    "demo", "--accelerator", "cpu", "--strategy", "single_device", "--no-progress",
)  # fmt: skip


@functools.cache
def demo_run_argv_lists() -> st.SearchStrategy[list[str]]:
    """``trainspec demo`` on one CPU with hostile ``--steps``, ``--batch-size`` and ``--seed``:
    every value in range trains (steps in range are 2 to 4), every other one must be refused
    with a one-line usage error."""
    from trainspec.reference.demo import MAX_BATCH_SIZE, MAX_SEED, MAX_STEPS

    steps = _demo_numbers(2, MAX_STEPS, st.integers(2, 4), high_runs=False)
    batch = _demo_numbers(1, MAX_BATCH_SIZE, st.integers(1, 64))
    seed = _demo_numbers(0, MAX_SEED, st.integers(0, MAX_SEED))
    return st.tuples(steps, batch, seed).map(
        lambda v: [*DEMO_RUN_ARGV, "--steps", v[0], "--batch-size", v[1], "--seed", v[2]]
    )


@contextlib.contextmanager
def demo_sandbox() -> Iterator[str]:
    """:func:`cli_sandbox` with the temporary directory inside it, so that a demo that leaves
    its ``trainspec-demo-*`` directory behind is seen (:func:`run_demo_cli`)."""
    with cli_sandbox() as directory:
        temporary = os.path.join(directory, "tmp")
        os.mkdir(temporary)
        previous = tempfile.tempdir
        tempfile.tempdir = temporary
        try:
            yield directory
        finally:
            tempfile.tempdir = previous


def run_demo_cli(argv: Sequence[str]) -> int:
    """:func:`run_cli`, then: a run that exits 0 trained, and left no temporary directory."""
    code = run_cli(argv)
    left = [name for name in os.listdir(tempfile.gettempdir()) if name.startswith("trainspec")]
    if left:
        raise BadResult(f"the demo left {left} in the temporary directory")
    return code


@st.composite
def demo_run_calls(draw: st.DrawFn) -> Call:
    """``main(["demo", ...])`` with :func:`demo_run_argv_lists`; run it in :func:`demo_sandbox`."""
    argv = draw(demo_run_argv_lists())
    return Call("demo_run", f"main({argv!r})", lambda: run_demo_cli(argv), (), ("",), ())


def _fake_builtin_targets(kind: str | None = None) -> list[object]:
    """Stands in for ``builtin_targets`` so ``trainspec verify [KIND]`` verifies tiny rows."""
    from trainspec.conformance.builtin_targets import BuiltinTarget

    rows = [
        BuiltinTarget("precision", "fuzz-structure-fails", f"{MODULE_NAME}:NotAPrecision"),
        BuiltinTarget("accelerator", "fuzz-missing", "trainspec_fuzz_no_such_module:Thing"),
        BuiltinTarget("collective", "fuzz-raises", f"{MODULE_NAME}:factory_that_raises"),
        BuiltinTarget("strategy", "fuzz-not-callable", f"{MODULE_NAME}:NOT_CALLABLE"),
    ]
    return [row for row in rows if kind is None or row.kind == kind]


@contextlib.contextmanager
def cli_sandbox() -> Iterator[str]:
    """A temporary working directory, ``builtin_targets`` replaced by tiny rows, and
    ``sys.path`` restored afterwards (the CLI puts the working directory on it)."""
    from trainspec.conformance import builtin_targets as module

    original = module.builtin_targets
    cwd = os.getcwd()
    with tempfile.TemporaryDirectory(prefix="trainspec-fuzz-cli-") as directory:
        module.builtin_targets = _fake_builtin_targets  # type: ignore[assignment]
        os.chdir(directory)
        try:
            yield directory
        finally:
            os.chdir(cwd)
            module.builtin_targets = original


def run_cli(argv: Sequence[str]) -> int:
    """``main(argv)`` with standard output and error captured; checks the exit rule."""
    from trainspec.conformance.cli import main

    out, err = io.StringIO(), io.StringIO()
    path = list(sys.path)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(list(argv))
    except SystemExit as exit_:
        raise BadResult(f"main() raised SystemExit({exit_.code!r}) instead of returning") from None
    finally:
        sys.path[:] = path
    _check_exit(code, out.getvalue(), err.getvalue())
    return code


def cli_call(argv: Sequence[str]) -> Call:
    """``main(argv)`` as a :class:`Call`; run it inside :func:`cli_sandbox`."""
    return Call("cli", f"main({list(argv)!r})", lambda: run_cli(argv), (), ("",), ())


@st.composite
def cli_calls(draw: st.DrawFn) -> Call:
    """``trainspec.conformance.cli.main(argv)`` with :func:`argv_lists`."""
    return cli_call(draw(argv_lists()))


def _check_exit(code: object, stdout: str, stderr: str) -> None:
    if type(code) is not int or code not in (0, 1, 2):
        raise BadResult(f"main() returned {code!r}; expected 0, 1 or 2")
    if code != 2:
        return
    if "usage: trainspec" in stderr + stdout and "error:" not in stderr:
        return  # no command given: the help, on either stream
    lines = stderr.splitlines()
    if len(lines) != 1 or not lines[0].startswith("trainspec") or "error:" not in lines[0]:
        raise BadResult(
            f"a usage error must be one 'trainspec...: error: ...' line; got {stderr!r}"
        )


# ---------------------------------------------------------------------------------------------
# The targets


@dataclasses.dataclass(frozen=True)
class FuzzTarget:
    """A function under fuzz: its calls, and the context every example runs in."""

    name: str
    calls: Callable[[], st.SearchStrategy[Call]]
    context: Callable[[], contextlib.AbstractContextManager[object]] = contextlib.nullcontext
    ci_examples: int = 100
    """Examples in the CI test (derandomized); the script takes ``--examples``."""


TARGETS: Final = (
    FuzzTarget("resolve", resolve_calls, ci_examples=300),
    FuzzTarget("parse_devices", parse_devices_calls, ci_examples=400),
    FuzzTarget("accelerator_init", accelerator_init_calls, ci_examples=200),
    FuzzTarget("precision_for_flag", precision_flag_calls, ci_examples=300),
    FuzzTarget("precision_load_state_dict", precision_state_calls, ci_examples=400),
    FuzzTarget("environment", environment_calls, ci_examples=300),
    FuzzTarget("cli", cli_calls, context=cli_sandbox, ci_examples=150),
    FuzzTarget("demo_run", demo_run_calls, context=demo_sandbox, ci_examples=20),
)
TARGETS_BY_NAME: Final = MappingProxyType({t.name: t for t in TARGETS})


# ---------------------------------------------------------------------------------------------
# Known bugs: reported, reproduced as strict xfails, not failed by the fuzz tests


@dataclasses.dataclass(frozen=True)
class KnownBug:
    """A finding its owner has not fixed yet, with minimal reproducers.

    ``matches`` recognises the fuzz findings it explains (target, kind of violation, error type
    and a message pattern); each of ``reproducers`` builds a :class:`Call` that shows it. When
    the bug is fixed, its reproducers pass, their strict xfails XPASS, and the entry must go.
    """

    id: str
    owner: str
    summary: str
    targets: tuple[str, ...]
    error_type: str
    message: str
    reproducers: tuple[Callable[[], Call], ...]
    kind: str = "raw exception"

    def matches(self, finding: Finding) -> bool:
        return (
            finding.target in self.targets
            and finding.kind == self.kind
            and re.fullmatch(self.error_type, finding.error_type) is not None
            and re.search(self.message, finding.message) is not None
        )


def in_cli_sandbox(call: Call) -> Call:
    """``call`` run inside :func:`cli_sandbox` (for a reproducer outside a fuzz run)."""

    def invoke() -> object:
        with cli_sandbox():
            return call.invoke()

    return dataclasses.replace(call, invoke=invoke)


KNOWN_BUGS: Final[tuple[KnownBug, ...]] = ()
"""The findings of ``scripts/fuzz_configuration.py`` that are not fixed yet."""


def known_bug(finding: Finding) -> KnownBug | None:
    """The :data:`KNOWN_BUGS` entry that explains ``finding``, if any."""
    for bug in KNOWN_BUGS:
        if bug.matches(finding):
            return bug
    return None
