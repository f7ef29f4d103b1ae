"""The table of kinds: everything the kit knows about each kind of implementation, once.

One :class:`KindSpec` per kind (:data:`KIND_TABLE`) gives its protocol, the clause prefixes its
checks use, the entry-point group that names its plugins, the modules holding its checks
(imported explicitly, in order, to find them), the clause a failing ``teardown`` breaks, the
capability vocabulary (structural capabilities add a protocol and are inferred with
``isinstance``; behavioural ones are declared) and the typed option vocabulary.

The structure layer, the capability vocabularies, the check lookup, the runner, the pytest
suites and the CLI derive from this table; reference_impls' registry keeps its own copy of the
entry-point groups (it must not import the kit) and a test keeps the two equal.

:func:`parse_options` validates a target's options against its kind's vocabulary: an unknown
key is a :class:`~trainspec.ConfigurationError` naming the valid ones, and a string value (as
``trainspec verify --option max_examples=5`` gives) is parsed to the option's type once.
Importing this module imports no torch.
"""

from __future__ import annotations

import contextlib
import difflib
import importlib
import os
from collections.abc import Callable, Iterator, Mapping  # noqa: TC003 (dataclass fields)
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final

from trainspec import (
    Accelerator,
    AsyncCheckpointIO,
    BackwardSyncControl,
    CheckpointIO,
    CheckpointLayoutControl,
    ClusterEnvironment,
    Collective,
    ConfigurationError,
    Launcher,
    Precision,
    ShardedModuleContext,
    StepBoundary,
    Strategy,
)
from trainspec.conformance.core import KINDS, Kind
from trainspec.reference._messages import describe_value as _shown

if TYPE_CHECKING:
    from contextlib import AbstractContextManager

__all__ = [
    "DOC_BEGIN",
    "DOC_END",
    "KIND_TABLE",
    "KindSpec",
    "Option",
    "StructuralCapability",
    "import_check_modules",
    "infer_structural",
    "coerce_options",
    "kind_spec",
    "markdown",
    "parse_option",
    "parse_options",
    "sandboxed_environ",
]


# -- sandboxes -------------------------------------------------------------------------------

_BASIC_VARIABLES: Final = ("PATH", "HOME", "TMPDIR", "TEMP", "TMP", "LANG", "LC_ALL", "SYSTEMROOT")


@contextlib.contextmanager
def sandboxed_environ(*, clear: bool = False) -> Iterator[None]:
    """Restore ``os.environ`` exactly on exit; with ``clear``, start from only a few basic
    variables (``PATH``, ``HOME``, temporary directories, locale)."""
    saved = dict(os.environ)
    try:
        if clear:
            os.environ.clear()
            os.environ.update({k: saved[k] for k in _BASIC_VARIABLES if k in saved})
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def _no_sandbox() -> AbstractContextManager[None]:
    return contextlib.nullcontext()


# -- options ---------------------------------------------------------------------------------


def _load(text: str) -> object:
    from trainspec.conformance.runner import load_object

    return load_object(text)


def _int(minimum: int) -> Callable[[object], object]:
    def parse(value: object) -> object:
        if isinstance(value, str):
            try:
                value = int(value.strip())
            except ValueError:
                raise ValueError(f"got {_shown(value)}") from None
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise ValueError(f"got {_shown(value)}")
        return value

    return parse


def _positive_float(value: object) -> object:
    if isinstance(value, str):
        try:
            value = float(value.strip())
        except ValueError:
            raise ValueError(f"got {_shown(value)}") from None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ValueError(f"got {_shown(value)}")
    return float(value)


def _str(value: object) -> object:
    if not isinstance(value, str) or not value:
        raise ValueError(f"got {_shown(value)}")
    return value


def _path(value: object) -> object:
    if isinstance(value, os.PathLike) or (isinstance(value, str) and value):
        return value
    raise ValueError(f"got {_shown(value)}")


def _device(value: object) -> object:
    if isinstance(value, str) and value:
        return value
    if type(value).__name__ == "device" and type(value).__module__ == "torch":
        return value
    raise ValueError(f"got {_shown(value)}")


def _callable(value: object) -> object:
    if isinstance(value, str):  # "package.module:attribute"
        try:
            value = _load(value)
        except ConfigurationError as error:
            raise ValueError(str(error)) from None
    if not callable(value):
        raise ValueError(f"got {_shown(value)}")
    return value


def _names(value: object) -> object:
    if isinstance(value, str):
        return tuple(part.strip() for part in value.split(",") if part.strip())
    if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        return tuple(value)
    raise ValueError(f"got {_shown(value)}")


def _dtypes(value: object) -> object:
    if isinstance(value, str):  # "float32,bfloat16"
        import torch

        names = [part.strip() for part in value.split(",") if part.strip()]
        found = [getattr(torch, name, None) for name in names]
        if not names or not all(isinstance(d, torch.dtype) for d in found):
            raise ValueError(f"got {_shown(value)}; give torch dtype names, e.g. float32,bfloat16")
        return tuple(found)
    if isinstance(value, (set, frozenset)) and all(type(v).__name__ == "dtype" for v in value):
        return tuple(sorted(value, key=str))  # a stable order for generated examples
    if isinstance(value, (list, tuple)) and all(type(v).__name__ == "dtype" for v in value):
        return tuple(value)
    raise ValueError(f"got {_shown(value)}")


def _anything(value: object) -> object:
    return value


@dataclass(frozen=True)
class Option:
    """One option a kind's checks read from ``target.options``."""

    name: str
    type: str
    """The accepted values, in words (``"int >= 1"``)."""
    description: str
    default: str
    """The default, in words (``"20"``, ``"a fresh temporary directory"``)."""
    parse: Callable[[object], object] = field(default=_anything, repr=False, compare=False)
    """Returns the value to use (a string parsed to the type) or raises ValueError."""
    harness: bool = False
    """Set by the distributed harness on every rank; a user rarely sets it."""


_MAX_EXAMPLES: Final = Option(
    "max_examples", "int >= 1", "hypothesis examples per generated check", "20", _int(1)
)
_DEVICE: Final = Option(
    "device",
    "str or torch.device",
    "the device the checks run on (the harness sets each rank's)",
    "'cpu'",
    _device,
)
_ENVIRONMENT_FACTORY: Final = Option(
    "environment_factory",
    "callable returning a ClusterEnvironment",
    "the environment collectives and strategies are set up with (the harness sets each rank's)",
    "a single-process environment",
    _callable,
    harness=True,
)
_RANK_CONTEXT: Final = Option(
    "rank_context",
    "RankContext",
    "this rank's view of the world (the distributed harness sets it; do not set it yourself)",
    "none (in-process runs)",
    harness=True,
)
_DISTRIBUTED: Final = (
    Option(
        "distributed_max_examples",
        "int >= 1",
        "hypothesis examples per property of the distributed checks",
        "10",
        _int(1),
    ),
    Option(
        "e2e_rtol",
        "float > 0",
        "relative tolerance of the end-to-end comparisons with plain PyTorch",
        "1e-4",
        _positive_float,
    ),
    Option(
        "e2e_atol",
        "float > 0",
        "absolute tolerance of the end-to-end comparisons with plain PyTorch",
        "1e-5",
        _positive_float,
    ),
)


# -- the table -------------------------------------------------------------------------------


@dataclass(frozen=True)
class StructuralCapability:
    """A capability that adds a protocol to the structure layer.

    It is never declared: an instance that implements ``protocol`` (``isinstance``) has it.
    ``replaces_base`` is true when ``protocol`` extends the kind's protocol (it is then checked
    instead of it, so a violation is reported once).
    """

    protocol: type
    description: str
    replaces_base: bool = False
    clause_prefix: str = ""
    """The prefix of the protocol's clauses (``"ACKPT"``)."""


@dataclass(frozen=True)
class KindSpec:
    """Everything the kit knows about one kind."""

    name: Kind
    protocol: type
    clause_prefixes: tuple[str, ...]
    """Clause prefixes of the kind's checks, the protocol's first (``("CKPT", "ACKPT")``)."""
    entry_point_group: str | None
    """The entry-point group naming plugins of this kind (``None``: not named by string)."""
    check_modules: tuple[str, ...]
    """Modules holding the kind's checks, imported in this order to find them: the kind's check
    module, or its check package followed by each of its modules (checks are ordered by layer,
    then by this order, then by definition)."""
    lifecycle_clause: str
    """The clause a failing ``teardown()`` breaks (``""``: the kind has no teardown)."""
    capabilities: Mapping[str, str]
    """Declared (behavioural) capabilities: name -> description."""
    distributed_check_modules: tuple[str, ...] = ()
    """Modules holding the checks that run only on the ranks of a distributed world, in
    order (``checks_for(kind, distributed=True)`` includes them)."""
    structural: Mapping[str, StructuralCapability] = field(default_factory=dict)
    """Inferred (structural) capabilities: name -> the protocol that gives it."""
    options: tuple[Option, ...] = ()
    sandbox: Callable[[], AbstractContextManager[None]] = field(
        default=_no_sandbox, repr=False, compare=False
    )
    """What every instance of the kind lives and dies in (checks, structure, teardown)."""

    @property
    def vocabulary(self) -> dict[str, str]:
        """Every capability, structural and declared: name -> description, by name."""
        merged = {name: cap.description for name, cap in self.structural.items()}
        merged.update(self.capabilities)
        return dict(sorted(merged.items()))

    def option(self, name: str) -> Option | None:
        """The option called ``name``, or ``None``."""
        return next((o for o in self.options if o.name == name), None)


_CHECKS: Final = "trainspec.conformance.checks"
_DISTRIBUTED_CHECKS: Final = "trainspec.conformance.distributed.checks"


def _package(package: str, *modules: str) -> tuple[str, ...]:
    """A check package and its modules, in order (the package first: it re-exports them)."""
    return (package, *(f"{package}.{module}" for module in modules))


KIND_TABLE: Final[Mapping[Kind, KindSpec]] = {
    "accelerator": KindSpec(
        "accelerator",
        Accelerator,
        ("ACC", "ERR"),
        "trainspec.accelerators",
        _package(f"{_CHECKS}.accelerator", "availability", "parsing", "devices", "errors"),
        "ACC-8",
        {},
        options=(_MAX_EXAMPLES,),
    ),
    "precision": KindSpec(
        "precision",
        Precision,
        ("PREC", "ERR"),
        "trainspec.precisions",
        _package(
            f"{_CHECKS}.precision", "dtypes", "setup", "conversion", "contexts", "steps", "state"
        ),
        "PREC-12",
        {
            "autocast": "forward_context enables torch.autocast for the device in compute_dtype",
            "gradient_scaling": "backward scales the loss; optimizer_step unscales, skips steps "
            "with non-finite gradients and lowers the scale (PREC-9); without it every step is "
            "taken (PREC-10)",
        },
        options=(_DEVICE,),
    ),
    "checkpoint_io": KindSpec(
        "checkpoint_io",
        CheckpointIO,
        ("CKPT", "ACKPT", "ERR"),
        "trainspec.checkpoint_io",
        _package(
            f"{_CHECKS}.checkpoint_io",
            "roundtrip",
            "atomicity",
            "saving",
            "loading",
            "lifecycle",
            "special_files",
            "interrupts",
            "async_io",
        ),
        "CKPT-12",
        {
            "local_paths": "accepts local file-system paths (str and os.PathLike); checkpoints "
            "are files or directories that other instances and processes see",
            "fsspec_urls": "accepts fsspec URLs such as memory://... and s3://...",
            "python_objects": "stores nested dicts, lists and tuples, Python ints, floats, "
            "bools, strings and None besides tensors (without it: a flat dict of tensors, and "
            "TypeError for anything else)",
            "strided_tensors": "non-contiguous tensors load back with their strides",
            "shared_storage": "tensors that share storage load back sharing it",
            "pickle": "the format can carry pickled Python objects: loading them must be an "
            "explicit opt-in (weights-only by default)",
        },
        structural={
            "async": StructuralCapability(
                AsyncCheckpointIO,
                "saves complete in the background (trainspec.AsyncCheckpointIO: ACKPT-1 ... "
                "ACKPT-5)",
                replaces_base=True,
                clause_prefix="ACKPT",
            ),
        },
        options=(
            Option(
                "base_path",
                "str (a directory or a URL prefix)",
                "where checks put their checkpoints; each check uses a unique child of it",
                "a fresh temporary directory per check",
                _str,
            ),
            _MAX_EXAMPLES,
            Option(
                "dtypes",
                "sequence of torch.dtype (or 'float32,bfloat16')",
                "the tensor dtypes the checkpoints contain (narrow it for formats that store "
                "fewer)",
                "every dtype the CPU supports",
                _dtypes,
            ),
            Option(
                "map_location_devices",
                "sequence of device names (or 'cpu,meta')",
                "devices the map-location check loads onto",
                "('cpu', 'meta')",
                _names,
            ),
            Option(
                "atomicity_rounds",
                "int >= 1",
                "saves made while a concurrent reader loads, in the atomicity check",
                "12",
                _int(1),
            ),
            Option(
                "interrupt_points",
                "int >= 0",
                "interrupt points tried per operation (save, load) in the interruption check "
                "(CKPT-14): up to half evenly over the implementation's own code, the rest "
                "evenly over the others; 0 tries every point",
                "32",
                _int(0),
            ),
            Option(
                "trusted_factory",
                "callable returning a CheckpointIO (or 'package.module:attribute')",
                "an instance explicitly configured to trust pickled content; with it the "
                "pickle check also verifies the opt-in loads that content",
                "none",
                _callable,
            ),
        ),
    ),
    "collective": KindSpec(
        "collective",
        Collective,
        ("COLL", "ERR"),
        None,
        _package(
            f"{_CHECKS}.collective",
            "common_rules",
            "lifecycle",
            "reductions",
            "gather_and_broadcast",
            "scatter_and_barrier",
        ),
        "COLL-5",
        {},
        options=(_DEVICE, _ENVIRONMENT_FACTORY, _RANK_CONTEXT, *_DISTRIBUTED),
        distributed_check_modules=(f"{_DISTRIBUTED_CHECKS}.collective",),
    ),
    "cluster_environment": KindSpec(
        "cluster_environment",
        ClusterEnvironment,
        ("ENV", "ERR"),
        "trainspec.cluster_environments",
        (f"{_CHECKS}.cluster_environment",),
        "ENV-6",
        {
            "configurable": "options['env_factory'] builds an instance for a given run "
            "description (world_size, global_rank, local_rank, node_rank, main_address, "
            "main_port as strings); enables the checks of chosen values and of inconsistent "
            "descriptions (ENV-3 ... ENV-5)",
        },
        options=(
            Option(
                "env_factory",
                "callable (Mapping[str, str]) -> ClusterEnvironment",
                "builds an instance for a run description (needed by 'configurable'); may "
                "raise ConfigurationError for a description it refuses or CheckSkipped for "
                "one it cannot express",
                "none",
                _callable,
            ),
        ),
        sandbox=sandboxed_environ,
    ),
    "launcher": KindSpec(
        "launcher",
        Launcher,
        ("LAUNCH", "ERR"),
        None,
        (f"{_CHECKS}.launcher",),
        "",
        {
            "multi_process": "launch starts options['num_processes'] (>= 2) ranks; the checks "
            "then verify every rank ran, was waited for, and was stopped when another failed",
        },
        options=(
            Option(
                "num_processes",
                "int >= 2",
                "how many processes the launcher starts (read with 'multi_process')",
                "2",
                _int(2),
            ),
            Option(
                "rank_variable",
                "str",
                "the environment variable a launched process reads its rank from",
                "'RANK'",
                _str,
            ),
        ),
    ),
    "strategy": KindSpec(
        "strategy",
        Strategy,
        ("STRAT", "SYNC", "SHARD", "LAYOUT", "STEP", "E2E", "ERR", "DCKPT"),
        "trainspec.strategies",
        _package(
            f"{_CHECKS}.strategy",
            "lifecycle",
            "modules",
            "training",
            "collectives",
            "checkpoints",
            "optional_protocols",
        ),
        "STRAT-4",
        {
            "data_parallel": "every rank holds the whole module and backward averages "
            "gradients over ranks (DDP-like); lets the checks predict gradients, norms and "
            "parameters with more than one rank",
            "sharded_checkpoint": "checkpoint_layout is 'sharded' and checkpoint_io is a "
            "trainspec.DistributedCheckpointIO; the DCKPT checks exercise it on the ranks",
        },
        structural={
            "backward_sync": StructuralCapability(
                BackwardSyncControl,
                "gradient synchronisation can be skipped for accumulation "
                "(trainspec.BackwardSyncControl: SYNC-1)",
                clause_prefix="SYNC",
            ),
            "checkpoint_layout": StructuralCapability(
                CheckpointLayoutControl,
                "declares its checkpoint layout, full or sharded "
                "(trainspec.CheckpointLayoutControl: LAYOUT-1)",
                clause_prefix="LAYOUT",
            ),
            "sharded_module": StructuralCapability(
                ShardedModuleContext,
                "modules can be built directly in sharded form "
                "(trainspec.ShardedModuleContext: SHARD-1)",
                clause_prefix="SHARD",
            ),
            "step_boundary": StructuralCapability(
                StepBoundary,
                "lazy execution with an explicit step boundary (trainspec.StepBoundary: STEP-1)",
                clause_prefix="STEP",
            ),
        },
        options=(
            Option(
                "checkpoint_dir",
                "str or os.PathLike",
                "a directory every rank can read, for the checkpoint checks",
                "a new temporary directory (made by global rank 0 and shared)",
                _path,
            ),
            _DEVICE,
            _ENVIRONMENT_FACTORY,
            _RANK_CONTEXT,
            *_DISTRIBUTED,
        ),
        distributed_check_modules=(
            f"{_DISTRIBUTED_CHECKS}.strategy",
            f"{_DISTRIBUTED_CHECKS}.end_to_end",
            f"{_DISTRIBUTED_CHECKS}.sharded",
        ),
    ),
}
"""Kind -> everything the kit knows about it, in :data:`~trainspec.conformance.core.KINDS`
order."""

if tuple(KIND_TABLE) != KINDS:  # pragma: no cover - a kit bug, caught on import
    raise RuntimeError("KIND_TABLE must list exactly core.KINDS, in order")


def kind_spec(kind: str) -> KindSpec:
    """The table entry of ``kind``; an unknown kind is a ConfigurationError naming the valid
    ones."""
    for name, spec in KIND_TABLE.items():
        if name == kind:
            return spec
    raise ConfigurationError(f"unknown kind {kind!r}; valid kinds: {', '.join(KINDS)}")


def import_check_modules(kind: Kind, *, distributed: bool = False) -> None:
    """Import every module holding ``kind``'s checks, which registers them (with
    ``distributed``, the modules of the checks that run on a world's ranks too)."""
    spec = KIND_TABLE[kind]
    for module in (*spec.check_modules, *(spec.distributed_check_modules if distributed else ())):
        importlib.import_module(module)


def infer_structural(kind: Kind, instance: object) -> frozenset[str]:
    """The structural capabilities ``instance`` has: those whose protocol it implements."""
    table = KIND_TABLE[kind].structural
    return frozenset(name for name, cap in table.items() if _implements(instance, cap.protocol))


def _implements(instance: object, protocol: type) -> bool:
    # runtime_checkable isinstance reads every member; a property that raises means "no".
    try:
        return isinstance(instance, protocol)
    except Exception:
        return False


def parse_option(kind: str, name: str, value: object) -> object:
    """``value`` of option ``name`` of ``kind``, validated and parsed to its type (a string
    from the command line becomes an int, a callable, ...). Raises
    :class:`~trainspec.ConfigurationError` naming the valid options or the accepted values."""
    spec = kind_spec(kind)
    option = spec.option(name)
    if option is None:
        valid = ", ".join(o.name for o in spec.options) or "none"
        close = difflib.get_close_matches(name, [o.name for o in spec.options], n=3, cutoff=0.6)
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        raise ConfigurationError(
            f"unknown option {name!r} for kind {kind!r}{hint}; valid options: {valid}"
        )
    try:
        return option.parse(value)
    except ValueError as error:
        raise ConfigurationError(
            f"option {name!r} of kind {kind!r} must be {option.type}; {error}"
        ) from None


def parse_options(kind: str, options: Mapping[str, object]) -> dict[str, object]:
    """Every option of ``options`` through :func:`parse_option`, in order: an unknown name
    or a bad value is a :class:`~trainspec.ConfigurationError`."""
    return {name: parse_option(kind, name, value) for name, value in options.items()}


def coerce_options(kind: str, options: Mapping[str, object]) -> dict[str, object]:
    """``options`` with the value of every option ``kind`` knows parsed to its type; unknown
    names are kept as they are (:func:`parse_options` refuses them when the run starts)."""
    spec = kind_spec(kind)
    return {
        name: parse_option(kind, name, value) if spec.option(name) is not None else value
        for name, value in options.items()
    }


# -- documentation ---------------------------------------------------------------------------

DOC_BEGIN: Final = "<!-- BEGIN GENERATED by scripts/gen_kinds_doc.py; do not edit -->"
DOC_END: Final = "<!-- END GENERATED -->"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def markdown() -> str:
    """The "every kind's options and capabilities" section of running-the-kit.md, between
    :data:`DOC_BEGIN` and :data:`DOC_END` (imports every check module of every kind, the
    distributed ones included, to name the checks: the text never depends on what was imported
    before)."""
    from trainspec.conformance.core import checks_for

    lines = [
        DOC_BEGIN,
        "",
        "## Every kind's capabilities and options",
        "",
        "Generated from the kit's table of kinds (`trainspec.conformance.kinds.KIND_TABLE`); a "
        "test keeps it up to date. *Inferred* capabilities are never declared: an instance that "
        "implements the protocol has them. *Declared* ones go in `conformance_capabilities` (or "
        "a `Target`'s `capabilities`). Options go in `conformance_options` (or `options`, or "
        "`--option NAME=VALUE`, parsed to the option's type).",
    ]
    for kind, spec in KIND_TABLE.items():
        checks = checks_for(kind, distributed=True)
        prefixes = ", ".join(f"{prefix}-\\*" for prefix in spec.clause_prefixes)
        group = f"`{spec.entry_point_group}`" if spec.entry_point_group else "none"
        lifecycle = spec.lifecycle_clause or "no clause (the kind has no teardown)"
        lines += [
            "",
            f"### `{kind}`",
            "",
            f"Protocol `trainspec.{spec.protocol.__name__}`; clauses {prefixes}; entry-point "
            f"group {group}; a failing `teardown()` is filed under {lifecycle}.",
            "",
            "| capability | how | meaning | checks that need it |",
            "|---|---|---|---|",
        ]
        structural = spec.structural
        for name, description in spec.vocabulary.items():
            how = (
                f"inferred (`trainspec.{structural[name].protocol.__name__}`)"
                if name in structural
                else "declared"
            )
            needing = ", ".join(f"`{c.name}`" for c in checks if name in c.requires) or "none"
            lines.append(f"| `{name}` | {how} | {_cell(description)} | {needing} |")
        if not spec.vocabulary:
            lines.append("| (none) | | | |")
        lines += ["", "| option | type | default | meaning |", "|---|---|---|---|"]
        for option in spec.options:
            meaning = option.description + (" (set by the harness)" if option.harness else "")
            lines.append(
                f"| `{option.name}` | {_cell(option.type)} | {_cell(option.default)} | "
                f"{_cell(meaning)} |"
            )
        if not spec.options:
            lines.append("| (none) | | | |")
    lines += ["", DOC_END]
    return "\n".join(lines) + "\n"
