"""Run one of the ``list`` / ``demo`` / ``typecheck`` subcommands the way
``trainspec.conformance.cli.main`` does, for as long as cli.py does not list them yet.

``python _standalone_cli.py demo --steps 4`` is ``trainspec demo --steps 4``. Launchers that
re-run the script for other ranks re-run this file with the same arguments.
"""

from __future__ import annotations

import importlib
import sys

from trainspec import ConfigurationError
from trainspec.conformance._cli_common import Command, OneLineArgumentParser, UsageError


def main(argv: list[str]) -> int:
    """``trainspec <argv>`` for one of this engineer's subcommands."""
    name, rest = argv[0], argv[1:]
    command = importlib.import_module(f"trainspec.conformance._cli_{name}").COMMAND
    assert isinstance(command, Command)
    parser = OneLineArgumentParser(prog=f"trainspec {name}")
    command.configure(parser)
    try:
        return command.run(parser.parse_args(rest))
    except SystemExit as exit_:  # --help
        return exit_.code if isinstance(exit_.code, int) else 0
    except (UsageError, ConfigurationError) as error:
        print(f"trainspec {name}: error: {' '.join(str(error).split())}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
