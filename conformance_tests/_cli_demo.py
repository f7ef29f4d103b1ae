"""``trainspec demo``: train a small model with any components, save halfway, resume.

::

    trainspec demo                                        CPU, one device, 20 steps
    trainspec demo --strategy ddp --devices 2             two gloo processes on the CPU
    trainspec demo --accelerator vcpu --checkpoint-io gzip --precision bf16-mixed

The logic is :func:`trainspec.reference.demo.run_demo`; this module turns options into a
:class:`~trainspec.reference.demo.DemoConfig` and prints rank 0's result. With a launcher that
re-runs the command for the other ranks, those ranks run this command again and print
nothing.

Exit status: 0 the resumed run reproduced the straight run, 1 it did not or training failed,
2 a usage error (an unknown name, an unavailable accelerator, a bad combination).
"""

from __future__ import annotations

import re
import sys
from typing import TYPE_CHECKING, Final

from trainspec.conformance._cli_common import Command, make_console

if TYPE_CHECKING:
    import argparse

    from trainspec.reference.demo import DemoResult
    from trainspec.types import DeviceRequest

__all__ = ["COMMAND", "add_arguments", "in_user_words", "parse_devices", "run"]

_PROG: Final = "trainspec demo"
_INTEGER: Final = re.compile(r"-?[0-9]{1,18}")
"""A count as an int: ASCII digits, at most 18 (``int()`` of over 4300 digits raises)."""
# trainspec.reference.demo's MAX_STEPS and MAX_BATCH_SIZE (a test keeps them equal): the
# parser is built without importing torch.
_MAX_STEPS: Final = 1_000_000
_MAX_BATCH_SIZE: Final = 65_536

_DESCRIPTION = """\
Train a small model on synthetic data with the components you name, through the reference
Runner: a straight run of --steps steps; a run in a freshly built strategy that saves a
checkpoint halfway; and another fresh strategy and Runner that resume from that checkpoint
and finish. The straight and the resumed run must end with the same loss and parameters;
both losses are printed, with where the checkpoint was saved.

Any registered name works (see 'trainspec list'), including plugins. Multi-process strategies
start their ranks through the strategy's launcher; only rank 0 prints.

Exit status: 0 the resume reproduced the straight run, 1 it did not or training failed,
2 a usage error.
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``demo``'s options to ``parser``."""
    parser.add_argument(
        "--accelerator", default="auto", help="a registered accelerator name (default: auto)"
    )
    parser.add_argument(
        "--strategy", default="auto", help="a registered strategy name (default: auto)"
    )
    parser.add_argument(
        "--devices",
        default="1",
        metavar="REQUEST",
        help="a device request: N, -1, auto, or indices like 0,1 (default: 1)",
    )
    parser.add_argument(
        "--precision", default="32-true", help="a precision flag or name (default: 32-true)"
    )
    parser.add_argument(
        "--steps",
        type=int,
        default=20,
        help=f"training steps, 2 to {_MAX_STEPS} (default: 20)",
    )
    parser.add_argument(
        "--batch-size",
        type=int,
        default=16,
        help=f"samples per rank and step, 1 to {_MAX_BATCH_SIZE} (default: 16)",
    )
    parser.add_argument(
        "--checkpoint-dir",
        metavar="PATH",
        help="where to save the checkpoint, kept afterwards (default: a new temporary "
        "directory, removed at the end unless --keep-checkpoint)",
    )
    parser.add_argument(
        "--keep-checkpoint",
        action="store_true",
        help="keep the temporary checkpoint directory and print where it is",
    )
    parser.add_argument(
        "--checkpoint-io",
        metavar="NAME",
        help="a registered checkpoint IO name (default: the strategy's own)",
    )
    parser.add_argument(
        "--seed", type=int, default=0, help="seed for data and model, 0 to 2**64-1 (default: 0)"
    )
    parser.add_argument(
        "--no-progress",
        action="store_true",
        help="print log lines instead of a progress bar",
    )


def parse_devices(text: str) -> DeviceRequest:
    """``"2"`` and ``"-1"`` as ints; anything else (``"auto"``, ``"0,1"``, a number of more
    than 18 digits) as given, for the accelerator to validate. Never raises."""
    stripped = text.strip()
    return int(stripped) if _INTEGER.fullmatch(stripped) else stripped


def run(args: argparse.Namespace) -> int:
    """Run the demo; 0 when the resume reproduced the straight run, 1 when it did not or
    training failed, 2 (one line on standard error) for a usage error."""
    from trainspec.errors import ConfigurationError, DeviceUnavailableError, TrainspecError
    from trainspec.reference.demo import DemoConfig, run_demo

    try:
        config = DemoConfig(
            accelerator=args.accelerator,
            strategy=args.strategy,
            devices=parse_devices(args.devices),
            precision=args.precision,
            checkpoint_io=args.checkpoint_io,
            checkpoint_dir=args.checkpoint_dir,
            steps=args.steps,
            batch_size=args.batch_size,
            seed=args.seed,
            progress="log" if args.no_progress else "bar",
            keep_checkpoint=args.keep_checkpoint,
        )
        result = run_demo(config)
    except (ConfigurationError, DeviceUnavailableError) as error:
        print(f"{_PROG}: error: {in_user_words(_one_line(str(error)))}", file=sys.stderr)
        return 2
    except TrainspecError as error:
        print(f"{_PROG}: failed: {_summary(error)}", file=sys.stderr)
        return 1
    if result.global_rank != 0:  # a rank the launcher started by re-running this command
        return 0 if result.resumed_matches else 1
    _print_result(result)
    return 0 if result.resumed_matches else 1


def _print_result(result: DemoResult) -> None:
    console = make_console()
    if result.identical:
        verdict = "[green]identical[/green] (loss and every parameter, bit for bit)"
    elif result.resumed_matches:
        verdict = (
            "[green]equal within tolerance[/green] (largest parameter difference "
            f"{result.max_parameter_difference:.3g})"
        )
    else:
        verdict = (
            "[red]DIFFERENT[/red]: resuming did not continue the run (largest parameter "
            f"difference {result.max_parameter_difference:.3g})"
        )
    console.print(
        f"straight run : {result.steps} steps, final loss {result.straight_loss!r}",
        highlight=False,
    )
    console.print(
        f"resumed run  : steps {result.resumed_from_step + 1}..{result.steps} in a fresh "
        f"{result.strategy}, final loss {result.resumed_loss!r}",
        highlight=False,
    )
    console.print(f"resume       : {verdict}", highlight=False)
    kept = (
        ""
        if result.checkpoint_kept
        else " (removed with its temporary directory; --keep-checkpoint keeps it)"
    )
    console.print(f"checkpoint   : {result.checkpoint_path}{kept}", highlight=False, soft_wrap=True)
    console.print(
        f"[dim]{result.world_size} rank(s) on {result.device} ({result.accelerator}), "
        f"{result.precision}, {result.checkpoint_io}, "
        f"{result.steps_per_second:.1f} steps/s[/dim]",
        highlight=False,
    )


def _one_line(text: str) -> str:
    return " ".join(text.split())


# DemoConfig's fields and resolve()'s parameters, as the options that set them.
_OPTIONS: Final = {
    "accelerator": "--accelerator",
    "strategy": "--strategy",
    "devices": "--devices",
    "precision": "--precision",
    "checkpoint_io": "--checkpoint-io",
    "steps": "--steps",
    "batch_size": "--batch-size",
    "seed": "--seed",
}
_CALLER: Final = re.compile(r"^(?:resolve\(\)|demo):\s*")
_NO_SUCH_NAME: Final = re.compile(r"^no (" + "|".join(_OPTIONS) + r") named ")
_LEADING_NAME: Final = re.compile(r"^(?:the )?(" + "|".join(_OPTIONS) + r")(?=[ =])(=?)")


def in_user_words(message: str) -> str:
    """``message`` as the command line's user sees it: without the internal function that
    raised it (``resolve():``, ``demo:``) and with a leading parameter name (``precision``,
    ``devices=0``, ``the checkpoint_io 'x'``) written as the option that sets it."""
    text = _CALLER.sub("", message, count=1)
    match = _LEADING_NAME.match(text)
    if match is None:
        named = _NO_SUCH_NAME.match(text)
        return f"{_OPTIONS[named.group(1)]}: {text}" if named else text
    option = _OPTIONS[match.group(1)]
    rest = text[match.end() :]
    return f"{option} {rest.lstrip()}" if match.group(2) else f"{option}{rest}"


def _summary(error: BaseException) -> str:
    """The error's first line plus, for a rank's traceback, its last line (the exception)."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    if not lines:
        return type(error).__name__
    if len(lines) == 1:
        return lines[0]
    return f"{lines[0]} ... {lines[-1]}"


COMMAND: Final = Command(
    name="demo",
    help="train a small model with any components, save a checkpoint and resume from it",
    description=_DESCRIPTION,
    configure=add_arguments,
    run=run,
)
