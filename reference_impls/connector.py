"""``resolve``: user-level choices (names, flags, instances) to one constructed Strategy.

Every argument accepts a registered name (see :mod:`trainspec.reference.registry`, so
installed plugins work by name) or an instance of the matching protocol. ``resolve`` only
*constructs*: it sets up no device, joins no process group and touches no file — the
returned strategy is in the state before ``setup_environment()``. It never writes attributes
of the components it builds; each is passed to a constructor.

Every invalid argument or combination raises :class:`~trainspec.ConfigurationError` naming
what was given and what is allowed (never a ``TypeError`` or ``AttributeError`` from inside a
component); an accelerator requested by name that this machine lacks raises
:class:`~trainspec.DeviceUnavailableError`. Whether a precision flag runs on the chosen device
is checked by ``precision.setup`` during ``setup_environment`` (PREC-2), which raises
:class:`~trainspec.UnsupportedError`, a ``ConfigurationError``.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Final, Generic, TypeVar

from trainspec.accelerator import Accelerator
from trainspec.checkpoint_io import CheckpointIO
from trainspec.cluster_environment import ClusterEnvironment
from trainspec.errors import ConfigurationError, DeviceUnavailableError, TrainspecError
from trainspec.precision import Precision
from trainspec.reference._messages import describe_value
from trainspec.reference.registry import Registry, RegistryKind, default_registry
from trainspec.strategy import Strategy
from trainspec.types import PRECISION_FLAGS

if TYPE_CHECKING:
    import torch

    from trainspec.types import DeviceRequest

__all__ = ["AUTO_ACCELERATOR_ORDER", "resolve", "resolve_accelerator"]

AUTO_ACCELERATOR_ORDER: Final[tuple[str, ...]] = ("cuda", "xla")
"""Registered accelerator names that ``accelerator="auto"`` tries first, in order.

The full ``"auto"`` order is: these names; then every other registered accelerator except
``"cpu"``, by name, skipping those whose device type is ``"cpu"``; then torch's current
accelerator type (``torch.accelerator``, e.g. ``"mps"`` or ``"xpu"``) through the generic
``TorchDeviceAccelerator`` when no registered accelerator has that device type; then
``"cpu"``. The first one whose ``is_available()`` is ``True`` wins; a plugin that fails to
load or to answer is skipped.
"""

_C = TypeVar("_C")

_INSTANCE_DEFAULTS: Final = {
    "accelerator": "'auto'",
    "devices": "'auto'",
    "num_nodes": "1",
    "precision": "'32-true'",
    "checkpoint_io": "None",
    "cluster_environment": "None",
    "plugins": "()",
}
"""What each argument must be left at when ``strategy`` is an instance (for the message)."""


def resolve(
    accelerator: str | Accelerator = "auto",
    strategy: str | Strategy = "auto",
    devices: DeviceRequest = "auto",
    num_nodes: int = 1,
    precision: str | Precision = "32-true",
    checkpoint_io: str | CheckpointIO | None = None,
    cluster_environment: str | ClusterEnvironment | None = None,
    plugins: Sequence[Precision | CheckpointIO | ClusterEnvironment] = (),
    *,
    registry: Registry | None = None,
) -> Strategy:
    """Build the strategy described by the arguments; nothing is set up.

    - ``accelerator``: a registered name, ``"auto"`` (see :data:`AUTO_ACCELERATOR_ORDER`) or
      an :class:`~trainspec.Accelerator`.
    - ``strategy``: a registered name, an already constructed :class:`~trainspec.Strategy`
      (then every other argument must keep its default: a strategy's components are given
      to its constructor), or ``"auto"``: ``"single_device"`` for one device on one node,
      ``"xla"`` for several XLA devices, otherwise ``"ddp"``.
    - ``devices``: a device request, parsed by the accelerator's ``parse_devices``.
    - ``num_nodes``: a positive int.
    - ``precision``: one of :data:`trainspec.PRECISION_FLAGS`, another registered precision
      name, or a :class:`~trainspec.Precision`.
    - ``checkpoint_io``, ``cluster_environment``: a registered name, an instance, or ``None``
      (the checkpoint IO: the strategy's default; the environment: the detected one).
    - ``plugins``: instances of Precision, CheckpointIO or ClusterEnvironment, as an
      alternative to the keyword of their kind (at most one per kind, and not both).
    - ``registry``: where names are looked up (default: the process-wide registry).

    Registered strategies are called with the keyword arguments ``accelerator``,
    ``precision``, ``checkpoint_io``, ``cluster_environment``, ``parallel_devices``,
    ``num_nodes``.
    """
    reg = registry if registry is not None else default_registry()

    if isinstance(strategy, Strategy):
        # Only a value of the default's own type can be the default: '!=' on a numpy array
        # gives an array, whose truth value raises.
        given = {
            "accelerator": not _is_str(accelerator, "auto"),
            "devices": not _is_str(devices, "auto"),
            "num_nodes": not (type(num_nodes) is int and num_nodes == 1),
            "precision": not _is_str(precision, "32-true"),
            "checkpoint_io": checkpoint_io is not None,
            "cluster_environment": cluster_environment is not None,
            "plugins": bool(plugins),
        }
        extra = [name for name, is_given in given.items() if is_given]
        if extra:
            defaults = ", ".join(f"{name}={_INSTANCE_DEFAULTS[name]}" for name in extra)
            raise ConfigurationError(
                f"resolve(): strategy is an instance ({type(strategy).__name__}), so "
                f"{', '.join(extra)} cannot also be given: leave them at their defaults "
                f"({defaults}) and pass those components to the strategy's constructor, or "
                "pass the strategy by name."
            )
        return strategy
    if not isinstance(strategy, str):
        raise ConfigurationError(
            "resolve(): strategy must be 'auto', a registered strategy name "
            f"({_known(reg, 'strategy')}) or a trainspec.Strategy instance; got "
            f"{describe_value(strategy)} of type {type(strategy).__name__}."
        )
    if isinstance(num_nodes, bool) or not isinstance(num_nodes, int) or num_nodes < 1:
        raise ConfigurationError(
            f"resolve(): num_nodes must be a positive int; got {describe_value(num_nodes)}."
        )

    precision_plugin, io_plugin, env_plugin = _sort_plugins(plugins)
    if precision_plugin is not None:
        if not _is_str(precision, "32-true"):
            raise ConfigurationError(
                "resolve(): a Precision was given both as precision= and in plugins; give one."
            )
        precision = precision_plugin
    if io_plugin is not None:
        if checkpoint_io is not None:
            raise ConfigurationError(
                "resolve(): a CheckpointIO was given both as checkpoint_io= and in plugins; "
                "give one."
            )
        checkpoint_io = io_plugin
    if env_plugin is not None:
        if cluster_environment is not None:
            raise ConfigurationError(
                "resolve(): a ClusterEnvironment was given both as cluster_environment= and "
                "in plugins; give one."
            )
        cluster_environment = env_plugin

    accelerator_obj = resolve_accelerator(accelerator, registry=reg)
    precision_obj = _resolve_precision(precision, reg)
    io_obj = (
        None
        if checkpoint_io is None
        else _resolve_named(checkpoint_io, "checkpoint_io", _CHECKPOINT_IO, reg)
    )
    env_obj = (
        _detect_environment()
        if cluster_environment is None
        else _resolve_named(cluster_environment, "cluster_environment", _ENVIRONMENT, reg)
    )
    parallel_devices = _parse_devices(accelerator_obj, devices)

    strategy_name = strategy
    if strategy == "auto":
        if len(parallel_devices) == 1 and num_nodes == 1:
            strategy_name = "single_device"
        elif accelerator_obj.device_type == "xla":
            strategy_name = "xla"
        else:
            strategy_name = "ddp"
    factory = reg.get("strategy", strategy_name)
    try:
        built = factory(
            accelerator=accelerator_obj,
            precision=precision_obj,
            checkpoint_io=io_obj,
            cluster_environment=env_obj,
            parallel_devices=parallel_devices,
            num_nodes=num_nodes,
        )
    except TrainspecError:
        raise
    except (TypeError, ValueError, AttributeError) as error:
        raise ConfigurationError(
            f"resolve(): the strategy {strategy_name!r} could not be constructed with "
            f"accelerator={accelerator_obj!r}, precision={precision_obj!r}, "
            f"devices={describe_value(parallel_devices)}, num_nodes={describe_value(num_nodes)}: "
            f"{type(error).__name__}: {str(error)[:300]}"
        ) from error
    if not isinstance(built, Strategy):
        raise ConfigurationError(
            f"resolve(): the strategy {strategy_name!r} must construct a trainspec.Strategy; "
            f"its factory returned {type(built).__name__}."
        )
    return built


def resolve_accelerator(
    accelerator: str | Accelerator = "auto", *, registry: Registry | None = None
) -> Accelerator:
    """The accelerator for a registered name, ``"auto"`` (see
    :data:`AUTO_ACCELERATOR_ORDER`) or an instance (returned as is).

    A name whose accelerator is not available here raises
    :class:`~trainspec.DeviceUnavailableError` naming the available ones.
    """
    reg = registry if registry is not None else default_registry()
    if isinstance(accelerator, Accelerator):
        return accelerator
    if not isinstance(accelerator, str):
        raise ConfigurationError(
            "resolve(): accelerator must be 'auto', a registered accelerator name "
            f"({_known(reg, 'accelerator')}) or a trainspec.Accelerator instance; got "
            f"{describe_value(accelerator)} of type {type(accelerator).__name__}."
        )
    if accelerator == "auto":
        return _auto_accelerator(reg)
    built = _build(reg, "accelerator", accelerator, _ACCELERATOR)
    if not _available(built):
        usable = [
            name
            for name in reg.names("accelerator")
            if name != accelerator and _available(_try_build(reg, name))
        ]
        raise DeviceUnavailableError(
            f"resolve(): accelerator {accelerator!r} is not available on this machine; "
            f"available: {', '.join(map(repr, usable)) or 'none'} (or 'auto')."
        )
    return built


def _auto_accelerator(reg: Registry) -> Accelerator:
    names = reg.names("accelerator")
    order = [n for n in AUTO_ACCELERATOR_ORDER if n in names]
    order += [n for n in names if n not in AUTO_ACCELERATOR_ORDER and n != "cpu"]
    seen_types: set[str] = set()
    for name in order:
        candidate = _try_build(reg, name)
        if candidate is None:
            continue
        device_type = _device_type(candidate)
        seen_types.add(device_type)
        # A CPU-type plugin is never preferred over the built-in CPU accelerator: "auto" is
        # for finding hardware, not for picking whichever CPU plugin happens to be installed.
        if device_type != "cpu" and _available(candidate):
            return candidate
    generic = _torch_current_accelerator(seen_types)
    if generic is not None:
        return generic
    return _build(reg, "accelerator", "cpu", _ACCELERATOR)


def _torch_current_accelerator(skip_types: set[str]) -> Accelerator | None:
    try:
        import torch

        current = torch.accelerator.current_accelerator(check_available=True)
        if current is None or current.type in skip_types or current.type == "cpu":
            return None
        module = importlib.import_module("trainspec.reference.accelerators.generic")
        candidate: object = module.TorchDeviceAccelerator(current.type)
    except Exception:  # "auto" must fall back to the CPU, whatever torch or the build lacks
        return None
    if isinstance(candidate, Accelerator) and _available(candidate):
        return candidate
    return None


def _resolve_precision(precision: object, reg: Registry) -> Precision:
    if isinstance(precision, Precision):
        return precision
    names = reg.names("precision")
    if not isinstance(precision, str) or precision not in names:
        flags = ", ".join(map(repr, PRECISION_FLAGS))
        others = [n for n in names if n not in PRECISION_FLAGS]
        more = f"; other registered precisions: {', '.join(map(repr, others))}" if others else ""
        raise ConfigurationError(
            f"resolve(): precision must be one of trainspec.PRECISION_FLAGS ({flags}){more}, "
            f"or a trainspec.Precision instance; got {describe_value(precision)}."
        )
    return _build(reg, "precision", precision, _PRECISION)


class _Protocol(Generic[_C]):
    """A protocol's name and an isinstance test that type checkers can follow."""

    def __init__(self, name: str, narrow: Callable[[object], _C | None]) -> None:
        self.name = name
        self.narrow = narrow


_ACCELERATOR: Final = _Protocol("Accelerator", lambda v: v if isinstance(v, Accelerator) else None)
_PRECISION: Final = _Protocol("Precision", lambda v: v if isinstance(v, Precision) else None)
_CHECKPOINT_IO: Final = _Protocol(
    "CheckpointIO", lambda v: v if isinstance(v, CheckpointIO) else None
)
_ENVIRONMENT: Final = _Protocol(
    "ClusterEnvironment", lambda v: v if isinstance(v, ClusterEnvironment) else None
)


def _resolve_named(value: object, kind: RegistryKind, protocol: _Protocol[_C], reg: Registry) -> _C:
    instance = protocol.narrow(value)
    if instance is not None:
        return instance
    if not isinstance(value, str):
        raise ConfigurationError(
            f"resolve(): {kind} must be a registered name ({_known(reg, kind)}), a "
            f"trainspec.{protocol.name} instance or None; got {describe_value(value)} of type "
            f"{type(value).__name__}."
        )
    return _build(reg, kind, value, protocol)


def _build(reg: Registry, kind: RegistryKind, name: str, protocol: _Protocol[_C]) -> _C:
    factory = reg.get(kind, name)
    try:
        built = factory()
    except TrainspecError:
        raise
    except Exception as error:
        raise ConfigurationError(
            f"resolve(): the {kind} {name!r} could not be constructed with no arguments "
            f"({type(error).__name__}: {error}); pass an instance instead."
        ) from error
    instance = protocol.narrow(built)
    if instance is None:
        raise ConfigurationError(
            f"resolve(): the {kind} {name!r} must construct a trainspec.{protocol.name}; "
            f"its factory returned {type(built).__name__}."
        )
    return instance


def _try_build(reg: Registry, name: str) -> Accelerator | None:
    try:
        return _build(reg, "accelerator", name, _ACCELERATOR)
    except Exception:
        return None


def _available(accelerator: Accelerator | None) -> bool:
    if accelerator is None:
        return False
    try:
        return bool(accelerator.is_available())
    except Exception:  # ACC-2 says it never raises; a plugin that does is "not available"
        return False


def _device_type(accelerator: Accelerator) -> str:
    try:
        return str(accelerator.device_type)
    except Exception:
        return ""


def _parse_devices(accelerator: Accelerator, devices: object) -> list[torch.device]:
    try:
        parsed = accelerator.parse_devices(devices)  # type: ignore[arg-type]  # checked there
    except TrainspecError:
        raise
    except Exception as error:
        raise ConfigurationError(
            f"resolve(): devices={describe_value(devices)} is not a valid request for "
            f"{describe_value(accelerator)} "
            f"({type(error).__name__}: {error}); valid forms: a positive int, -1, 'auto', "
            "'0,1', or a list of indices."
        ) from error
    return list(parsed)


def _detect_environment() -> ClusterEnvironment:
    module = importlib.import_module("trainspec.reference.cluster_environments")
    environment: object = module.detect_environment()
    if not isinstance(environment, ClusterEnvironment):
        raise ConfigurationError(
            "resolve(): environment detection must return a trainspec.ClusterEnvironment; "
            f"got {type(environment).__name__}."
        )
    return environment


def _sort_plugins(
    plugins: object,
) -> tuple[Precision | None, CheckpointIO | None, ClusterEnvironment | None]:
    if isinstance(plugins, (str, bytes)) or not isinstance(plugins, Sequence):
        raise ConfigurationError(
            "resolve(): plugins must be a sequence of Precision, CheckpointIO or "
            f"ClusterEnvironment instances; got {describe_value(plugins)}."
        )
    found: dict[str, object] = {}
    for plugin in plugins:
        for kind, protocol in (
            ("precision", Precision),
            ("checkpoint_io", CheckpointIO),
            ("cluster_environment", ClusterEnvironment),
        ):
            if isinstance(plugin, protocol):
                if kind in found:
                    raise ConfigurationError(
                        f"resolve(): plugins holds more than one {kind}: "
                        f"{describe_value(found[kind])} and {describe_value(plugin)}; give one."
                    )
                found[kind] = plugin
                break
        else:
            raise ConfigurationError(
                "resolve(): every plugin must be a trainspec.Precision, CheckpointIO or "
                f"ClusterEnvironment instance; got {describe_value(plugin)} of type "
                f"{type(plugin).__name__}."
            )
    precision = found.get("precision")
    io = found.get("checkpoint_io")
    environment = found.get("cluster_environment")
    return (
        precision if isinstance(precision, Precision) else None,
        io if isinstance(io, CheckpointIO) else None,
        environment if isinstance(environment, ClusterEnvironment) else None,
    )


def _is_str(value: object, expected: str) -> bool:
    """Whether ``value`` is the string ``expected`` (never compares another type)."""
    return isinstance(value, str) and value == expected


def _known(reg: Registry, kind: RegistryKind) -> str:
    try:
        names = reg.names(kind)
    except Exception:
        return "none"
    return "known: " + (", ".join(map(repr, names)) or "none")
