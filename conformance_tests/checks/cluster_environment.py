"""Behaviour checks for :class:`trainspec.ClusterEnvironment` (ENV-1 ... ENV-6).

An environment reads its description from the process (usually environment variables), so
most rules can only be checked for chosen descriptions. A target that declares the
``configurable`` capability provides a factory that builds an instance for a given run
description; without it the kit checks the instance from ``target.make()`` as it finds it in
this process (and skips the value checks when ``detect()`` says the process does not run in
that environment).

Target options read here:

``env_factory`` (``Callable[[Mapping[str, str]], ClusterEnvironment]``, needed by
``configurable``)
    Builds an instance describing the run given as a mapping with the keys ``world_size``,
    ``global_rank``, ``local_rank``, ``node_rank``, ``main_address`` and ``main_port``. The
    values are strings and may be malformed on purpose (``"abc"``, ``"-1"``, ``""``): write
    them where your environment reads them (for example ``os.environ["RANK"] =
    description["global_rank"]``) or pass them to the constructor. The check calls the
    factory with ``os.environ`` cleared to a few basics (``PATH``, ``HOME``, temporary
    directories, locale) and restores ``os.environ`` exactly afterwards. The factory may raise
    :class:`~trainspec.ConfigurationError` for a description its environment refuses at
    construction, or :class:`~trainspec.conformance.core.CheckSkipped` for a description its
    environment cannot express: that description is left out and the check goes on with the
    others (a check is skipped only when nothing is left for it to check).

Every instance the kit makes of a cluster environment (the structure layer's included) is made,
used and torn down inside a sandbox of ``os.environ`` (:func:`sandboxed_environ`), so a
``teardown`` that changes variables it never set is seen by ENV-6 and never changes the
process running the kit.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from functools import partial
from typing import Final, cast

from trainspec.cluster_environment import ClusterEnvironment
from trainspec.conformance._helpers import (
    describe_exception,
    describe_value,
    failure,
    snippet,
)
from trainspec.conformance.core import CheckSkipped, Target, check
from trainspec.conformance.kinds import KIND_TABLE, sandboxed_environ
from trainspec.errors import ConfigurationError

__all__ = [
    "CAPABILITIES",
    "INVALID_DESCRIPTIONS",
    "VALID_DESCRIPTIONS",
    "EnvFactory",
    "sandboxed_environ",
]

CAPABILITIES: Final[dict[str, str]] = dict(KIND_TABLE["cluster_environment"].capabilities)
"""The kind's declared capabilities (from :data:`trainspec.conformance.kinds.KIND_TABLE`)."""

EnvFactory = Callable[[Mapping[str, str]], ClusterEnvironment]
"""The ``env_factory`` option: a run description in, an environment describing it out."""

VALID_DESCRIPTIONS: Final[tuple[Mapping[str, str], ...]] = (
    {
        "world_size": "1",
        "global_rank": "0",
        "local_rank": "0",
        "node_rank": "0",
        "main_address": "127.0.0.1",
        "main_port": "29517",
    },
    {
        "world_size": "8",
        "global_rank": "5",
        "local_rank": "1",
        "node_rank": "1",
        "main_address": "10.1.2.3",
        "main_port": "1",
    },
    {
        "world_size": "4",
        "global_rank": "3",
        "local_rank": "3",
        "node_rank": "0",
        "main_address": "node-007.cluster.example",
        "main_port": "65535",
    },
)
"""Consistent run descriptions: an environment built for one must report exactly it."""


def _broken(why: str, **changes: str) -> tuple[str, Mapping[str, str]]:
    description = dict(VALID_DESCRIPTIONS[1])
    description.update(changes)
    return why, description


INVALID_DESCRIPTIONS: Final[tuple[tuple[str, Mapping[str, str]], ...]] = (
    _broken("global_rank >= world_size", world_size="4", global_rank="4", local_rank="0"),
    _broken("negative global_rank", global_rank="-1", local_rank="0"),
    _broken("world_size 0", world_size="0", global_rank="0", local_rank="0"),
    _broken("non-integer global_rank", global_rank="abc"),
    _broken("non-integer world_size", world_size="eight"),
    _broken("local_rank > global_rank", global_rank="1", local_rank="2"),
    _broken("negative node_rank", node_rank="-1"),
    _broken("port 0", main_port="0"),
    _broken("port 65536", main_port="65536"),
    _broken("non-integer port", main_port="http"),
    _broken("empty main_address", main_address=""),
)
"""(what is wrong, description): each **must** be refused with ConfigurationError (ENV-5)."""

# Variables a scheduler or launcher might set, set to garbage for the detect() robustness check.
_GARBAGE_VARIABLES: Final[Mapping[str, str]] = {
    "RANK": "x",
    "LOCAL_RANK": "",
    "WORLD_SIZE": "-3",
    "GROUP_RANK": "?",
    "MASTER_ADDR": "",
    "MASTER_PORT": "not-a-port",
    "TORCHELASTIC_RUN_ID": "",
    "SLURM_NTASKS": "abc",
    "SLURM_PROCID": "x",
    "SLURM_LOCALID": "-",
    "SLURM_NODEID": "1.5",
    "SLURM_JOB_ID": "",
    "SLURM_JOB_NAME": "bash",
    "OMPI_COMM_WORLD_RANK": "x",
    "PMI_RANK": "x",
}


def _factory(target: Target[ClusterEnvironment]) -> EnvFactory:
    factory = target.options.get("env_factory")
    if not callable(factory):
        raise TypeError(
            "a cluster environment target that declares 'configurable' must give "
            "options['env_factory']: a callable taking a run description (a mapping of "
            "world_size, global_rank, local_rank, node_rank, main_address, main_port to "
            f"strings) and returning the environment; got {factory!r}"
        )
    return cast("EnvFactory", factory)


def _built(
    target: Target[ClusterEnvironment], description: Mapping[str, str]
) -> ClusterEnvironment:
    environment = _factory(target)(dict(description))
    if not isinstance(environment, ClusterEnvironment):
        raise TypeError(
            f"options['env_factory'] must return a trainspec.ClusterEnvironment; "
            f"got {environment!r}"
        )
    return environment


def _factory_snippet(
    target: Target[ClusterEnvironment], description: Mapping[str, str], body: str
) -> str:
    lines = [
        "import os",
        f"# env_factory: the options['env_factory'] of {target.display_name}",
        "os.environ.clear()  # the check starts from an empty environment",
        f"env = env_factory({dict(description)!r})",
        *body.splitlines(),
    ]
    return "\n".join("    " + line for line in lines)


def _build_or_skip(
    target: Target[ClusterEnvironment], description: Mapping[str, str], skipped: list[str]
) -> ClusterEnvironment | None:
    """The instance ``env_factory`` builds for ``description``, or ``None`` when the factory
    skips the description (CheckSkipped: it cannot express it), the reason then added to
    ``skipped``."""
    try:
        return _built(target, description)
    except CheckSkipped as skip:
        skipped.append(skip.reason)
        return None


def _nothing_left(skipped: list[str]) -> CheckSkipped:
    reasons = "; ".join(sorted(set(skipped)))
    return CheckSkipped(f"options['env_factory'] skipped every description to check: {reasons}")


def _make_snippet(target: Target[ClusterEnvironment], body: str) -> str:
    return snippet(target, body, var="env")


def _for_each_instance(
    target: Target[ClusterEnvironment],
    body: Callable[[ClusterEnvironment, Mapping[str, str] | None], None],
) -> None:
    """Run ``body`` on each instance whose values can be checked: ``target.make()`` when it
    detects this process, and (``configurable``) one per valid description, each with its
    description (``None`` for ``make()``), inside a sandbox of ``os.environ``."""
    found = False
    skipped: list[str] = []
    with sandboxed_environ():
        environment = target.make()
        if _detects(environment):
            found = True
            try:
                body(environment, None)
            finally:
                _teardown_quietly(environment)
    if "configurable" in target.capabilities:
        for description in VALID_DESCRIPTIONS:
            with sandboxed_environ(clear=True):
                built = _build_or_skip(target, description, skipped)
                if built is None:
                    continue
                found = True
                try:
                    body(built, description)
                finally:
                    _teardown_quietly(built)
    if not found and skipped:
        raise _nothing_left(skipped)
    if not found:
        raise CheckSkipped(
            "the environment does not detect this process and the target is not "
            "'configurable' (give options['env_factory'] to check chosen descriptions)"
        )


def _detects(environment: ClusterEnvironment) -> bool:
    # A detect() that raises is ENV-1's failure; elsewhere it counts as "not detected".
    try:
        return environment.detect() is True
    except Exception:
        return False


def _where(
    target: Target[ClusterEnvironment], description: Mapping[str, str] | None, body: str
) -> str:
    if description is None:
        return _make_snippet(target, body)
    return _factory_snippet(target, description, body)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _read(environment: ClusterEnvironment, name: str) -> object:
    value: object = getattr(environment, name)
    return value


# --------------------------------------------------------------------------- ENV-1


@check("ENV-1", "cluster_environment")
def check_environment_detect_never_raises_and_changes_nothing(
    target: Target[ClusterEnvironment],
) -> None:
    """detect() must return a bool without raising and without changing os.environ.

    Whatever the process's variables hold: none, garbage, or a malformed description."""
    scenarios: list[
        tuple[str, Callable[[], ClusterEnvironment | None], Mapping[str, str] | None]
    ] = [
        ("this process's variables", target.make, None),
        ("no variables at all", target.make, {}),
        ("garbage scheduler variables", target.make, _GARBAGE_VARIABLES),
    ]
    if "configurable" in target.capabilities:
        for why, description in INVALID_DESCRIPTIONS:
            scenarios.append(
                (
                    f"a malformed description ({why})",
                    partial(_safe_build, target, description),
                    {},
                )
            )
    for what, make, variables in scenarios:
        with sandboxed_environ(clear=variables is not None):
            if variables:
                os.environ.update(variables)
            environment = make()
            if environment is None:  # the factory refused the description: nothing to detect
                continue
            before = dict(os.environ)
            repro = _make_snippet(
                target,
                "import os\n"
                + (f"os.environ.update({dict(variables)!r})\n" if variables else "")
                + "print(env.detect())",
            )
            try:
                result = environment.detect()
            except Exception as error:
                raise failure(
                    target,
                    "ENV-1",
                    expected=f"return a bool from detect() with {what}",
                    actual=describe_exception(error),
                    hint="detect() answers whether this process runs here; treat missing or "
                    "malformed variables as False.",
                    snippet=repro,
                ) from error
            if not isinstance(result, bool):
                raise failure(
                    target,
                    "ENV-1",
                    expected=f"return a bool from detect() with {what}",
                    actual=describe_value(result),
                    snippet=repro,
                )
            after = dict(os.environ)
            if after != before:
                changed = sorted(
                    k for k in set(before) | set(after) if before.get(k) != after.get(k)
                )
                raise failure(
                    target,
                    "ENV-1",
                    expected=f"leave os.environ unchanged in detect() with {what}",
                    actual=f"variables changed: {', '.join(changed)}",
                    hint="detect() must only read.",
                    snippet=repro,
                )


def _safe_build(
    target: Target[ClusterEnvironment], description: Mapping[str, str]
) -> ClusterEnvironment | None:
    try:
        return _built(target, description)
    except (ConfigurationError, CheckSkipped):  # refused, or cannot be expressed: nothing to ask
        return None


# --------------------------------------------------------------------------- ENV-2


@check("ENV-2", "cluster_environment")
def check_environment_creates_processes_externally_is_a_constant_bool(
    target: Target[ClusterEnvironment],
) -> None:
    """creates_processes_externally must be a bool that does not change between reads."""
    with sandboxed_environ():
        environment = target.make()
        first = environment.creates_processes_externally
        second = environment.creates_processes_externally
        if not isinstance(first, bool) or first != second:
            raise failure(
                target,
                "ENV-2",
                expected="report creates_processes_externally as the same bool on every read",
                actual=f"{first!r} then {second!r}",
                snippet=_make_snippet(
                    target,
                    "print(env.creates_processes_externally, env.creates_processes_externally)",
                ),
            )


# --------------------------------------------------------------------------- ENV-3, ENV-4


@check("ENV-3", "cluster_environment")
def check_environment_main_address_and_port_are_valid(target: Target[ClusterEnvironment]) -> None:
    """main_address must be a non-empty str and main_port an int in [1, 65535].

    For a described run, exactly the described address and port."""

    def verify(environment: ClusterEnvironment, description: Mapping[str, str] | None) -> None:
        address, port = _read(environment, "main_address"), _read(environment, "main_port")
        repro = _where(target, description, "print(env.main_address, env.main_port)")
        valid = (
            isinstance(address, str)
            and bool(address.strip())
            and isinstance(port, int)
            and not isinstance(port, bool)
            and 1 <= port <= 65535
        )
        if not valid:
            raise failure(
                target,
                "ENV-3",
                expected="report a non-empty main_address and an int main_port in [1, 65535]",
                actual=f"main_address={address!r}, main_port={port!r}",
                hint="Convert the port variable with int() and validate its range.",
                snippet=repro,
            )
        if description is not None and (address, port) != (
            description["main_address"],
            int(description["main_port"]),
        ):
            raise failure(
                target,
                "ENV-3",
                expected=f"report main_address={description['main_address']!r} and "
                f"main_port={int(description['main_port'])} for the described run",
                actual=f"main_address={address!r}, main_port={port!r}",
                snippet=repro,
            )

    _for_each_instance(target, verify)


_RANK_NAMES: Final = ("world_size", "global_rank", "local_rank", "node_rank")


@check("ENV-4", "cluster_environment")
def check_environment_ranks_are_within_range(target: Target[ClusterEnvironment]) -> None:
    """Ranks must be ints with 0 <= local_rank <= global_rank < world_size, node_rank >= 0.

    For a described run, exactly the described ranks."""

    def verify(environment: ClusterEnvironment, description: Mapping[str, str] | None) -> None:
        values = {name: _read(environment, name) for name in _RANK_NAMES}
        shown = ", ".join(f"{name}={value!r}" for name, value in values.items())
        repro = _where(
            target,
            description,
            "print(env.world_size, env.global_rank, env.local_rank, env.node_rank)",
        )
        ints = [value for value in values.values() if _is_int(value)]
        if len(ints) != len(values):
            raise failure(
                target,
                "ENV-4",
                expected="report world_size, global_rank, local_rank and node_rank as ints",
                actual=shown,
                snippet=repro,
            )
        world, rank, local, node = (int(str(value)) for value in values.values())
        if not (world >= 1 and 0 <= rank < world and 0 <= local <= rank and node >= 0):
            raise failure(
                target,
                "ENV-4",
                expected="report world_size >= 1, 0 <= global_rank < world_size, "
                "0 <= local_rank <= global_rank and node_rank >= 0",
                actual=shown,
                hint="Ranks are 0-based; convert 1-based scheduler ids.",
                snippet=repro,
            )
        if description is not None:
            wanted = {name: int(description[name]) for name in _RANK_NAMES}
            if values != wanted:
                raise failure(
                    target,
                    "ENV-4",
                    expected=f"report {wanted} for the described run",
                    actual=shown,
                    snippet=repro,
                )

    _for_each_instance(target, verify)


# --------------------------------------------------------------------------- ENV-5


@check("ENV-5", "cluster_environment")
def check_environment_validate_accepts_a_consistent_description(
    target: Target[ClusterEnvironment],
) -> None:
    """validate() must not raise for a complete, consistent description."""

    def verify(environment: ClusterEnvironment, description: Mapping[str, str] | None) -> None:
        try:
            environment.validate()
        except Exception as error:
            raise failure(
                target,
                "ENV-5",
                expected="accept a consistent description in validate()",
                actual=describe_exception(error),
                snippet=_where(target, description, "env.validate()"),
            ) from error

    _for_each_instance(target, verify)


@check("ENV-5", "cluster_environment", requires=("configurable",))
def check_environment_validate_rejects_inconsistent_descriptions(
    target: Target[ClusterEnvironment],
) -> None:
    """validate() must raise ConfigurationError for an inconsistent description.

    Rank >= world size, a bad port or address, non-integer ranks, ..."""
    skipped: list[str] = []
    for why, description in INVALID_DESCRIPTIONS:
        repro = _factory_snippet(target, description, "env.validate()")
        with sandboxed_environ(clear=True):
            try:
                environment = _built(target, description)
            except ConfigurationError:
                continue  # refused at construction: as good as validate()
            except CheckSkipped as skip:  # cannot be expressed: the other descriptions go on
                skipped.append(skip.reason)
                continue
            except Exception as error:
                raise failure(
                    target,
                    "ENV-5",
                    expected=f"refuse a description with {why} with ConfigurationError",
                    actual=f"construction raised {describe_exception(error)}",
                    hint="Translate int() and lookup errors into ConfigurationError naming "
                    "the variable and the allowed values.",
                    snippet=repro,
                ) from error
            try:
                environment.validate()
            except ConfigurationError:
                continue
            except Exception as error:
                raise failure(
                    target,
                    "ENV-5",
                    expected=f"raise ConfigurationError from validate() for {why}",
                    actual=describe_exception(error),
                    hint="Translate int() and lookup errors into ConfigurationError naming "
                    "the variable and the allowed values.",
                    snippet=repro,
                ) from error
            finally:
                _teardown_quietly(environment)
            raise failure(
                target,
                "ENV-5",
                expected=f"raise ConfigurationError from validate() for {why}",
                actual="validate() returned normally",
                hint="Check types and ranges of every value validate() reads.",
                snippet=repro,
            )
    if len(skipped) == len(INVALID_DESCRIPTIONS):
        raise _nothing_left(skipped)


def _teardown_quietly(environment: ClusterEnvironment) -> None:
    # Cleanup only; ENV-6 checks teardown itself.
    try:
        environment.teardown()
    except Exception:
        pass


# --------------------------------------------------------------------------- ENV-6


@check("ENV-6", "cluster_environment")
def check_environment_teardown_is_idempotent_and_restores_the_process(
    target: Target[ClusterEnvironment],
) -> None:
    """teardown() must undo every change to os.environ and be idempotent."""
    builders: list[tuple[Callable[[], ClusterEnvironment], Mapping[str, str] | None]] = [
        (target.make, None)
    ]
    if "configurable" in target.capabilities:
        builders += [(partial(_built, target, d), d) for d in VALID_DESCRIPTIONS]
    for build, description in builders:
        with sandboxed_environ(clear=description is not None):
            before = dict(os.environ) if description is None else {}
            try:
                environment = build()
            except CheckSkipped:  # env_factory cannot express it: check the other builders
                continue
            if description is not None:
                before = dict(os.environ)  # the factory's variables describe the run
            used = description is not None or _detects(environment)
            if used:  # read everything a strategy reads, so lazy changes happen now
                for name in (
                    "main_address",
                    "main_port",
                    "world_size",
                    "global_rank",
                    "local_rank",
                    "node_rank",
                    "creates_processes_externally",
                ):
                    _read(environment, name)
                environment.validate()
            repro = _where(
                target,
                description,
                "import os\nbefore = dict(os.environ)\n"
                + (
                    "env.main_address, env.main_port, env.world_size, env.global_rank\n"
                    if used
                    else ""
                )
                + "env.teardown()\nenv.teardown()\nassert dict(os.environ) == before",
            )
            for attempt in ("first", "second"):
                try:
                    environment.teardown()
                except Exception as error:
                    raise failure(
                        target,
                        "ENV-6",
                        expected=f"return normally from the {attempt} teardown()",
                        actual=describe_exception(error),
                        hint="teardown() is idempotent.",
                        snippet=repro,
                    ) from error
            after = dict(os.environ)
            if after != before:
                changed = sorted(
                    k for k in set(before) | set(after) if before.get(k) != after.get(k)
                )
                raise failure(
                    target,
                    "ENV-6",
                    expected="restore os.environ in teardown()",
                    actual=f"variables still changed after teardown: {', '.join(changed)}",
                    hint="Remember each variable you set and restore or remove it in teardown().",
                    snippet=repro,
                )
