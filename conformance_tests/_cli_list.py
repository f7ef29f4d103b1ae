"""``trainspec list``: every component the registry knows, built in or from a plugin.

::

    trainspec list                         a table of every kind
    trainspec list --kind accelerator      one kind
    trainspec list --json                  the same rows as JSON, for scripts

One row per registered name and source (a name registered by two distributions is listed
twice, with the clash in its notes). Availability is the accelerator's ``is_available()`` on
this machine; the other kinds do not depend on the machine and show ``-`` once their factory
imports, ``no`` (with the import error) when it does not.

Exit status: 0 listed (also when a plugin is broken: that is reported in its row), 2 a usage
error such as an unknown ``--kind``.
"""

from __future__ import annotations

import json
import re
import sys
from typing import TYPE_CHECKING, Final

from trainspec.conformance._cli_common import Command, UsageError, make_console

if TYPE_CHECKING:
    import argparse

    from trainspec.reference.registry import ComponentInfo, RegistryKind

__all__ = ["COMMAND", "add_arguments", "component_record", "run"]

_PROG: Final = "trainspec list"
_KINDS: Final[tuple[RegistryKind, ...]] = (
    "accelerator",
    "strategy",
    "precision",
    "checkpoint_io",
    "cluster_environment",
)
"""The registry's kinds (``trainspec.reference.registry.REGISTRY_KINDS``), repeated here so
that building the parser imports nothing heavy; a test keeps the two equal."""

_ROLE: Final = re.compile(r":[a-z]+:`~?([^`]+)`")

_DESCRIPTION = """\
List every accelerator, strategy, precision, checkpoint IO and cluster environment that can be
named by a string (resolve(accelerator="...") and friends): the built-in reference
implementations and those of installed plugin distributions (entry points). For each: its
name, kind, the distribution that provides it (with version), a description, and whether it
is available here (accelerators: is_available() on this machine; other kinds: '-' when the
plugin imports, 'no' when it does not).

Exit status: 0 listed, 2 a usage error.
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``list``'s options to ``parser``."""
    parser.add_argument(
        "--kind",
        action="append",
        default=[],
        metavar="KIND",
        help=f"list only this kind (repeatable): {', '.join(_KINDS)}",
    )
    parser.add_argument(
        "--json",
        action="store_true",
        help="print a JSON array of components instead of the table",
    )


def component_record(info: ComponentInfo) -> dict[str, object]:
    """One component as a JSON-ready dict (the ``--json`` format).

    Keys: ``name``, ``kind``, ``object_path``, ``distribution``, ``version``, ``source``,
    ``description``, ``available`` (``true``/``false`` for accelerators, ``null`` for other
    kinds, ``false`` when the plugin could not be loaded), ``loadable`` and ``error``.
    """
    return {
        "name": info.name,
        "kind": info.kind,
        "object_path": info.object_path,
        "distribution": info.distribution,
        "version": info.version,
        "source": info.source,
        "description": info.description,
        "available": info.available,
        "loadable": not _load_failed(info),
        "error": info.error,
    }


def run(args: argparse.Namespace) -> int:
    """List the components; 0 on success, 2 (one line on standard error) for bad options."""
    try:
        kinds = _selected_kinds(args.kind)
    except UsageError as error:
        print(f"{_PROG}: error: {error}", file=sys.stderr)
        return 2
    from trainspec.reference.registry import default_registry

    registry = default_registry()
    infos = [info for kind in kinds for info in registry.list_components(kind)]
    if args.json:
        print(json.dumps([component_record(info) for info in infos], indent=2))
        return 0
    _print_table(infos, kinds)
    return 0


def _selected_kinds(requested: list[str]) -> list[RegistryKind]:
    selected: list[RegistryKind] = []
    by_name: dict[str, RegistryKind] = {known: known for known in _KINDS}
    for value in requested:
        for name in (part.strip() for part in value.split(",")):
            kind = by_name.get(name)
            if kind is None:
                raise UsageError(f"unknown kind {name!r}; valid kinds: {', '.join(_KINDS)}")
            if kind not in selected:
                selected.append(kind)
    return selected or list(_KINDS)


def _load_failed(info: ComponentInfo) -> bool:
    # The registry reports a factory that cannot be imported as available=False with an
    # error; for an accelerator, available=False alone means "imports, but no device here".
    if info.available is not False:
        return False
    return info.kind != "accelerator" or (info.error is not None and not info.description)


def _availability(info: ComponentInfo) -> str:
    if _load_failed(info):
        return "[red]no[/red]"
    if info.available is True:
        return "[green]yes[/green]"
    if info.available is False:
        return "[yellow]no[/yellow]"
    return "[dim]-[/dim]"


def _summary(info: ComponentInfo) -> str:
    """The first paragraph of the component's docstring on one line (the table wraps it), or
    the registry's first line when the object cannot be read again."""
    import importlib
    import inspect

    module, _, attribute = info.object_path.partition(":")
    try:
        target: object = importlib.import_module(module)
        for part in attribute.split("."):
            target = getattr(target, part)
    except Exception:  # the registry loaded it already; anything else keeps its line
        return info.description
    paragraph = (inspect.getdoc(target) or "").strip().split("\n\n")[0]
    return " ".join(paragraph.split()) or info.description


def _plain(text: str) -> str:
    """A docstring line without reStructuredText markup: ``:class:`~a.B``` -> ``B``,
    double backquotes -> single."""
    text = _ROLE.sub(lambda match: match.group(1).rsplit(".", 1)[-1], text)
    return text.replace("``", "`")


def _print_table(infos: list[ComponentInfo], kinds: list[RegistryKind]) -> None:
    from rich.markup import escape
    from rich.table import Table

    console = make_console()
    table = Table(title="trainspec components", title_justify="left")
    table.add_column("kind", style="bold")
    table.add_column("name", style="cyan")
    table.add_column("source")
    table.add_column("available", justify="center")
    table.add_column("description")
    for info in infos:
        description = escape(_plain(_summary(info))) or "[dim](no docstring)[/dim]"
        if info.error:
            description += f"\n[red]{escape(' '.join(info.error.split()))}[/red]"
        table.add_row(
            info.kind, escape(info.name), escape(info.source), _availability(info), description
        )
    console.print(table)
    empty = [kind for kind in kinds if not any(info.kind == kind for info in infos)]
    for kind in empty:
        console.print(f"[dim]no {kind} is registered[/dim]")
    console.print(
        f"[dim]{len(infos)} component(s). available: accelerators report is_available() on "
        "this machine; '-' means the kind does not depend on the machine.[/dim]"
    )


COMMAND: Final = Command(
    name="list",
    help="list the built-in and plugin components with their availability",
    description=_DESCRIPTION,
    configure=add_arguments,
    run=run,
)
