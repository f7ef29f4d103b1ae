"""``TargetSpec``: a conformance target as plain, picklable data.

A :class:`~trainspec.conformance.Target` holds a factory *object*; the ranks of a distributed
world are separate processes, so the harness sends a description instead and every rank
rebuilds the target from it: the factory's import path (``"package.module:attribute"``), the
declared capabilities, the expected failures and the options. Building imports the factory's
module in the rank; the options travel by pickle and so **must** be picklable.
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, cast

from trainspec.conformance._helpers import qualified_name
from trainspec.conformance.core import KINDS, Kind, Target
from trainspec.errors import ConfigurationError

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping

    from typing_extensions import Self

__all__ = ["TargetSpec", "factory_path"]


def factory_path(factory: object) -> str:
    """The ``"package.module:qualified.name"`` under which ``factory`` can be imported.

    Raises :class:`~trainspec.ConfigurationError` for an object other processes cannot import
    by name: a lambda, a function defined inside another function, a ``functools.partial``
    or an object without ``__module__``/``__qualname__``.
    """
    named = qualified_name(factory)
    if named is None:
        raise ConfigurationError(
            f"the distributed harness rebuilds the target in every rank from an import path, "
            f"so its factory must be a module-level class or function; got {factory!r}. Move "
            "it to module level, or pass a TargetSpec with factory='package.module:attribute' "
            "and the settings in options."
        )
    return f"{named[0]}:{named[1]}"


@dataclass(frozen=True)
class TargetSpec:
    """What every rank needs to rebuild a :class:`~trainspec.conformance.Target`.

    ``factory`` names (``"package.module:attribute"``) a zero-argument factory returning a
    fresh instance, or a ``Target`` object whose settings the fields here add to (as
    ``trainspec verify KIND TARGET`` does). Construction checks the kind, the shape of the
    path and that ``options`` pickle, raising :class:`~trainspec.ConfigurationError`; whether
    the path imports is only known in the ranks.
    """

    kind: Kind
    factory: str
    name: str = ""
    capabilities: frozenset[str] = frozenset()
    expected_failures: Mapping[str, str] = field(default_factory=dict)
    options: Mapping[str, object] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ConfigurationError(f"unknown kind {self.kind!r}; valid kinds: {', '.join(KINDS)}")
        module, sep, attribute = self.factory.partition(":")
        if not sep or not module or not attribute:
            raise ConfigurationError(
                f"factory {self.factory!r} must be 'package.module:attribute' (for example "
                "'trainspec.reference.collectives.torch_dist:TorchCollective')"
            )
        if isinstance(self.capabilities, str):
            raise ConfigurationError(
                f"capabilities must be a collection of names, not the string {self.capabilities!r}"
            )
        object.__setattr__(self, "capabilities", frozenset(self.capabilities))
        object.__setattr__(self, "expected_failures", dict(self.expected_failures))
        object.__setattr__(self, "options", dict(self.options))
        try:
            pickle.dumps(self.options)
        except Exception as error:
            raise ConfigurationError(
                f"the options of target {self.display_name!r} must be picklable to reach the "
                f"ranks ({type(error).__name__}: {error}); pass module-level objects or plain "
                "values."
            ) from error

    @property
    def display_name(self) -> str:
        """``name`` if given, else the factory path."""
        return self.name or self.factory

    @classmethod
    def of(
        cls,
        target: object,
        *,
        capabilities: Iterable[str] = (),
        expected_failures: Mapping[str, str] | None = None,
        options: Mapping[str, object] | None = None,
    ) -> Self:
        """A spec for ``target``: a ``TargetSpec``, a ``Target`` with an importable factory,
        or a ``(kind, factory)`` pair whose factory is a ``"module:attribute"`` string or an
        importable callable. ``capabilities`` are added; ``expected_failures`` and
        ``options`` override entries. Anything else raises
        :class:`~trainspec.ConfigurationError`."""
        if isinstance(capabilities, str):
            raise ConfigurationError(
                f"capabilities must be a collection of names, not the string {capabilities!r}"
            )
        if isinstance(target, TargetSpec):
            kind, path, name = target.kind, target.factory, target.name
            base_caps, base_xfail, base_options = (
                target.capabilities,
                target.expected_failures,
                target.options,
            )
        elif isinstance(target, Target):
            known = cast("Target[object]", target)
            kind, path, name = known.kind, factory_path(known.factory), known.name
            base_caps, base_xfail, base_options = (
                known.capabilities,
                known.expected_failures,
                known.options,
            )
        elif isinstance(target, tuple) and len(target) == 2:
            pair = cast("tuple[object, object]", target)
            kind_value, factory = pair
            if not isinstance(kind_value, str) or kind_value not in KINDS:
                raise ConfigurationError(
                    f"unknown kind {kind_value!r}; valid kinds: {', '.join(KINDS)}"
                )
            kind = kind_value
            if isinstance(factory, str):
                path = factory
            elif callable(factory):
                path = factory_path(cast("Callable[[], object]", factory))
            else:
                raise ConfigurationError(
                    f"a target factory must be 'module:attribute' or a callable; got {factory!r}"
                )
            name, base_caps, base_xfail, base_options = "", frozenset(), {}, {}
        else:
            raise ConfigurationError(
                "a distributed target must be a TargetSpec, a trainspec.conformance.Target "
                f"or a (kind, factory) pair; got {type(target).__name__} {target!r:.80}"
            )
        return cls(
            kind=kind,
            factory=path,
            name=name,
            capabilities=frozenset(base_caps) | frozenset(capabilities),
            expected_failures={**base_xfail, **(expected_failures or {})},
            options={**base_options, **(options or {})},
        )

    def build(self, extra_options: Mapping[str, object] | None = None) -> Target[object]:
        """The :class:`~trainspec.conformance.Target` this spec describes, with
        ``extra_options`` added (they override); imports the factory's module. Raises
        :class:`~trainspec.ConfigurationError` when the path does not import or names
        something that is not a factory or a target of this kind."""
        from trainspec.conformance.runner import load_object, make_target

        obj = load_object(self.factory)
        return make_target(
            self.kind,
            obj,
            name=self.name or ("" if isinstance(obj, Target) else self.factory),
            capabilities=self.capabilities,
            expected_failures=self.expected_failures,
            options={**self.options, **(extra_options or {})},
        )
