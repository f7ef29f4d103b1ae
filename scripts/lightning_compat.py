"""Generate docs/bridges/lightning-compatibility.md: Lightning's CPU built-ins under the kit.

Runs the conformance kit on every target in ``trainspec.bridges.lightning.targets.TARGETS``
(Lightning 2.6's CPU built-in plugins, bridged with ``trainspec.bridges.lightning``), in
process or on a 2-rank gloo world, and writes one table per target: every check, its status,
and for every failure the analysis from :data:`ANALYSIS` below (a real divergence of Lightning,
citing its source, or a kit/spec defect). A failure without an analysis makes the script exit
1, so the page never shows an unexplained failure.

    .venv/bin/python scripts/lightning_compat.py            # rewrite the page
    .venv/bin/python scripts/lightning_compat.py --check    # exit 1 if the page is stale

The page lists statuses, not messages (messages carry machine-dependent numbers); the messages
are one command away: ``trainspec verify KIND trainspec.bridges.lightning.targets:NAME``.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from collections.abc import Sequence

PAGE: Final = (
    Path(__file__).resolve().parent.parent / "docs" / "bridges" / "lightning-compatibility.md"
)

_L: Final = "lightning/fabric"  # source paths below are relative to site-packages/lightning

_NO_SYNCHRONIZE: Final = (
    "Bridge limit: Lightning's Accelerator has no `synchronize` "
    f"(`{_L}/accelerators/accelerator.py`, class `Accelerator`), so the bridge raises "
    "`UnsupportedError` rather than invent a no-op."
)
_CKPT13: Final = (
    "Divergence: Lightning opens, replaces and removes whatever is at the path: "
    f"`{_L}/plugins/io/torch_io.py` `save_checkpoint` (`_atomic_save` in "
    f"`{_L}/utilities/cloud_io.py` moves a temporary file over it), `load_checkpoint` "
    "(`fs.open`, which blocks on a FIFO) and `remove_checkpoint` (`fs.rm(path, recursive=True)`)"
    " never check for a regular file."
)
_CROSS_FS: Final = (
    "Divergence (a race): `_atomic_save` (`{l}/utilities/cloud_io.py`) writes inside an fsspec "
    "transaction; for local paths fsspec's `LocalFileOpener` writes to a temporary file made "
    "by `tempfile.mkstemp()` in `$TMPDIR` and `shutil.move`s it on commit "
    "(`fsspec/implementations/local.py`). With the checkpoint on another file system that "
    "move is a copy, so a concurrent reader can see a partial file (CKPT-3). Whether the "
    "check's readers hit the window varies from run to run."
).replace("{l}", _L)
_KILLED_CROSS_FS: Final = (
    "Divergence: the same staging in `$TMPDIR` as above (`_atomic_save`, "
    "`{l}/utilities/cloud_io.py`; fsspec's `LocalFileOpener` commits with `shutil.move`). On "
    "`$TMPDIR`'s own file system the move is a rename and every kill left the old or the new "
    "checkpoint; on another file system it is a copy onto the target, so a writer killed "
    "while the target changes leaves a torn file that loads as `CheckpointCorruptedError` "
    "(CKPT-3). Machine-dependent (skipped where no other file system is writable)."
).replace("{l}", _L)
_CKPT5: Final = (
    "Divergence: `TorchCheckpointIO.save_checkpoint` raises `TypeError` for any "
    f"`storage_options` that is not `None`, even an empty mapping (`{_L}/plugins/io/torch_io.py`);"
    " CKPT-5 refuses only keys the IO does not support."
)
_ASYNC: Final = (
    "Divergence: Lightning's `AsyncCheckpointIO` "
    "(`lightning/pytorch/plugins/io/async_plugin.py`) returns from `save_checkpoint` before "
    "the write, but its `load_checkpoint` and `remove_checkpoint` do not wait for a pending "
    "save of the same path, and it has no `wait()` (so it cannot be declared `async`, and the "
    "kit reads right after a save, which CKPT-1 allows); a background error surfaces only at "
    "`teardown`."
)
_ENV5: Final = (
    "Divergence / bridge limit: Lightning environments have no `validate()` "
    f"(`{_L}/plugins/environments/cluster_environment.py`; `validate_settings` needs the "
    "trainer's device and node counts) and read ranks with `int()` only, so "
    "`global_rank >= world_size` is accepted; the bridge's `validate()` adds no check of its own."
)
_NO_REMOVE: Final = (
    "Bridge limit: Fabric strategies have no `remove_checkpoint` "
    f"(`{_L}/strategies/strategy.py`; only Trainer strategies do)."
)
_NO_LIFECYCLE: Final = (
    "Divergence: Lightning strategies keep no lifecycle state; `setup_module` before "
    f"`setup_environment` is not refused (`{_L}/strategies/strategy.py`, `ddp.py`), DDP fails "
    "inside torch (`Default process group has not been initialized`)."
)
_DDP_TEARDOWN: Final = (
    "Divergence: `DDPStrategy` defines no `teardown` (`{l}/strategies/ddp.py`) and inherits "
    "`ParallelStrategy.teardown` (`{l}/strategies/parallel.py`), which tears down the cluster "
    "environment and then `Strategy.teardown` (`{l}/strategies/strategy.py`: precision, "
    "accelerator, checkpoint IO) but never calls `torch.distributed.destroy_process_group`. "
    "The only call is `_destroy_dist_connection`, registered with `atexit` by "
    "`_init_dist_connection` and only for the `nccl` backend (`{l}/utilities/distributed.py`); "
    "with `gloo` the group lives until the process ends. The default group is still "
    "initialised after `teardown()` (STRAT-4; the harness reports it once, at the first check "
    "that shows it, and destroys it after every check), and a second instance in the same "
    "process reuses a group it did not create: `_init_dist_connection` returns early when "
    "`torch.distributed.is_initialized()`."
).replace("{l}", _L)
_NO_TIMEOUT: Final = (
    "Bridge limit: Lightning's collectives take no per-call timeout (the timeout is given "
    f"once to `init_group`, `{_L}/plugins/collectives/torch_collective.py`); the bridge raises "
    "`UnsupportedError` for `timeout=`."
)
_INT_MEAN: Final = (
    "Divergence: `TorchCollective.all_reduce(op='avg')` hands `ReduceOp.AVG` to an in-place "
    f"`torch.distributed.all_reduce` (`{_L}/plugins/collectives/torch_collective.py`), which "
    "fails for integer tensors (`result type Float can't be cast to the desired output type "
    "Long`); COLL-6 makes the mean of integers a floating-point tensor."
)

ANALYSIS: Final[dict[tuple[str, str], str]] = {
    # -- CPUAccelerator ---------------------------------------------------------------------
    ("accelerator_cpu", "check_accelerator_parses_every_accepted_request_form"): (
        "Divergence: `_parse_cpu_cores` accepts only an int > 0 or its digit string "
        f"(`{_L}/accelerators/cpu.py`): `-1` (all devices) and index lists are refused."
    ),
    ("accelerator_cpu", "check_accelerator_rejects_malformed_requests"): (
        "Divergence: `_parse_cpu_cores(True)` passes its `isinstance(cpu_cores, int)` test "
        f"(`{_L}/accelerators/cpu.py`): `devices=True` means one process."
    ),
    ("accelerator_cpu", "check_accelerator_rejects_requests_beyond_device_count"): (
        "Divergence: Lightning has no count of existing CPU devices (the bridge's "
        "`device_count()` is `auto_device_count()`, 1 for CPU) and `_parse_cpu_cores` has no "
        f"upper bound (`{_L}/accelerators/cpu.py`)."
    ),
    ("accelerator_cpu", "check_accelerator_setup_device_refuses_a_missing_index"): (
        "Divergence: `CPUAccelerator.setup_device` checks `device.type` only "
        f"(`{_L}/accelerators/cpu.py`); `cpu:1` is accepted."
    ),
    ("accelerator_cpu", "check_accelerator_synchronize_waits_for_queued_work"): _NO_SYNCHRONIZE,
    ("accelerator_cpu", "check_accelerator_device_stats_refuse_another_device_type"): (
        "Divergence: `CPUAccelerator.get_device_stats` ignores its `device` argument and "
        "returns the host's psutil figures for any device "
        "(`lightning/pytorch/accelerators/cpu.py`)."
    ),
    # -- Precision --------------------------------------------------------------------------
    ("precision_32_true", "check_precision_convert_input_casts_only_floating_tensors"): (
        "Divergence: the base `Precision.convert_input` is a no-op "
        f"(`{_L}/plugins/precision/precision.py`): a float64 input reaches a 32-true module "
        "unconverted."
    ),
    ("precision_16_mixed", "check_precision_unscales_exactly_once_per_step"): (
        "Divergence: `MixedPrecision.unscale_gradients` calls `scaler.unscale_` every time "
        f"(`{_L}/plugins/precision/amp.py`); torch raises `RuntimeError` on the second call in a "
        "step (PREC-8 makes repeated unscaling idempotent)."
    ),
    ("precision_16_mixed", "check_precision_load_state_dict_rejects_malformed_state"): (
        "Divergence: `MixedPrecision.load_state_dict` hands the state to "
        f"`GradScaler.load_state_dict` unchecked (`{_L}/plugins/precision/amp.py`); a string "
        "scale is accepted."
    ),
    # -- CheckpointIO -----------------------------------------------------------------------
    ("torch_checkpoint_io", "check_checkpoint_io_rejects_unknown_storage_options"): _CKPT5,
    ("torch_checkpoint_io", "check_checkpoint_io_killed_save_leaves_old_or_new_checkpoint"): (
        _KILLED_CROSS_FS
    ),
    ("async_checkpoint_io", "check_checkpoint_io_killed_save_leaves_old_or_new_checkpoint"): (
        _KILLED_CROSS_FS
    ),
    (
        "torch_checkpoint_io",
        "check_checkpoint_io_saves_are_atomic_on_another_file_system_than_tmpdir",
    ): _CROSS_FS,
    (
        "async_checkpoint_io",
        "check_checkpoint_io_saves_are_atomic_on_another_file_system_than_tmpdir",
    ): _CROSS_FS,
    (
        "torch_checkpoint_io",
        "check_checkpoint_io_save_refuses_special_files_and_keeps_them",
    ): _CKPT13,
    ("torch_checkpoint_io", "check_checkpoint_io_remove_refuses_special_files_and_keeps_them"): (
        _CKPT13
    ),
    ("torch_checkpoint_io", "check_checkpoint_io_load_refuses_special_files_without_blocking"): (
        _CKPT13
    ),
    ("async_checkpoint_io", "check_checkpoint_io_rejects_unknown_storage_options"): _CKPT5,
    (
        "async_checkpoint_io",
        "check_checkpoint_io_save_refuses_special_files_and_keeps_them",
    ): _CKPT13,
    ("async_checkpoint_io", "check_checkpoint_io_remove_refuses_special_files_and_keeps_them"): (
        _CKPT13
    ),
    ("async_checkpoint_io", "check_checkpoint_io_load_refuses_special_files_without_blocking"): (
        _CKPT13
    ),
    ("async_checkpoint_io", "*"): _ASYNC,
    # -- ClusterEnvironment -----------------------------------------------------------------
    (
        "lightning_environment",
        "check_environment_validate_rejects_inconsistent_descriptions",
    ): _ENV5,
    ("torchelastic_environment", "check_environment_validate_rejects_inconsistent_descriptions"): (
        _ENV5
    ),
    ("slurm_environment", "check_environment_validate_rejects_inconsistent_descriptions"): _ENV5,
    ("slurm_environment", "check_environment_detect_never_raises_and_changes_nothing"): (
        "Divergence: `SLURMEnvironment.__init__` calls `_validate_srun_variables`, which parses "
        f"`SLURM_NTASKS` with `int()` (`{_L}/plugins/environments/slurm.py`): with a malformed "
        "value the environment raises `ValueError` before `detect()` can be asked."
    ),
    # -- Strategies -------------------------------------------------------------------------
    ("single_device_strategy", "check_strategy_components_implement_their_protocols"): (
        "Divergence: Fabric's `SingleDeviceStrategy` has no cluster environment "
        f"(`{_L}/strategies/single_device.py`); the bridge raises `UnsupportedError`."
    ),
    ("single_device_strategy", "check_strategy_refuses_training_before_setup_environment"): (
        _NO_LIFECYCLE
    ),
    ("single_device_strategy", "check_strategy_all_reduce_computes_every_reduce_op"): (
        "Divergence: `SingleDeviceStrategy.all_reduce` returns its input tensor itself "
        f"(`{_L}/strategies/single_device.py`), not a new tensor (STRAT-12, COLL-1)."
    ),
    ("single_device_strategy", "check_strategy_broadcast_and_gather_follow_the_collective_rules"): (
        "Divergence: `SingleDeviceStrategy.broadcast` ignores `src` "
        f"(`{_L}/strategies/single_device.py`); `src=1` in a world of one is not refused."
    ),
    ("single_device_strategy", "check_strategy_remove_checkpoint_removes_it_for_every_rank"): (
        _NO_REMOVE
    ),
    ("ddp_strategy", "check_strategy_refuses_training_before_setup_environment"): _NO_LIFECYCLE,
    ("ddp_strategy", "check_strategy_process_dataloader_shares_are_disjoint_and_complete"): (
        "Divergence of responsibility: `DDPStrategy.process_dataloader` returns the loader "
        f"unchanged (`{_L}/strategies/strategy.py`); the `DistributedSampler` is added by "
        f"`Fabric.setup_dataloaders` (`{_L}/fabric.py`), which the bridge does not copy."
    ),
    ("ddp_strategy", "check_strategy_all_reduce_computes_every_reduce_op"): (
        "Divergence: `DDPStrategy.all_reduce` reduces in place (`_sync_ddp` in "
        f"`{_L}/utilities/distributed.py`): the input changes (STRAT-12, COLL-1)."
    ),
    ("ddp_strategy", "check_strategy_broadcast_and_gather_follow_the_collective_rules"): (
        "Divergence: `DDPStrategy.broadcast` does not check `src` "
        f"(`{_L}/strategies/ddp.py`); torch's `RuntimeError` arrives as `CollectiveError`, not "
        "the `ConfigurationError` COLL-9 asks for."
    ),
    (
        "ddp_strategy",
        "check_strategy_save_checkpoint_writes_a_complete_checkpoint_before_returning",
    ): (
        "Divergence of responsibility: `Strategy.save_checkpoint` writes on global rank zero "
        f"and returns on every rank at once (`{_L}/strategies/strategy.py`); the barrier is in "
        f"`Fabric.save` (`{_L}/fabric.py`). STRAT-16 puts it in the strategy."
    ),
    ("ddp_strategy", "check_strategy_remove_checkpoint_removes_it_for_every_rank"): _NO_REMOVE,
    ("ddp_strategy", "teardown:*"): _DDP_TEARDOWN,
    # -- Collective -------------------------------------------------------------------------
    (
        "torch_collective",
        "check_collective_operations_leave_inputs_unchanged_and_return_new_tensors",
    ): (
        "Divergence: `TorchCollective.all_reduce` and `broadcast` work in place and return "
        f"their input (`{_L}/plugins/collectives/torch_collective.py`)."
    ),
    ("torch_collective", "check_collective_operations_accept_a_timeout"): _NO_TIMEOUT,
    ("torch_collective", "check_collective_barrier_returns_once_every_rank_arrived"): _NO_TIMEOUT,
    ("torch_collective", "check_collective_peer_that_leaves_makes_others_raise_collective_error"): (
        "The check uses a barrier with a timeout. " + _NO_TIMEOUT
    ),
    ("torch_collective", "check_collective_refuses_operations_before_setup"): (
        "Divergence: before `setup` (and after `teardown`) `TorchCollective` raises a plain "
        f"`RuntimeError` (`{_L}/plugins/collectives/torch_collective.py`, `group`), which the "
        "bridge's table maps to `CollectiveError`; it cannot tell it from a failed collective "
        "without parsing the message."
    ),
    ("torch_collective", "check_collective_teardown_is_idempotent_and_allows_setup_again"): (
        "Divergence: after `teardown`, `TorchCollective` raises a plain `RuntimeError` "
        f"(`{_L}/plugins/collectives/torch_collective.py`), mapped to `CollectiveError`, not "
        "`LifecycleError`."
    ),
    ("torch_collective", "check_collective_all_reduce_defaults_to_mean"): _INT_MEAN,
    ("torch_collective", "check_collective_all_reduce_computes_every_reduce_op"): _INT_MEAN,
    ("torch_collective", "check_collective_reduce_scatter_reduces_each_rank_its_share"): _INT_MEAN,
    ("torch_collective", "check_collective_all_reduce_accepts_any_layout_and_dtype"): (
        "Divergence: `TorchCollective.all_reduce` reduces in place "
        f"(`{_L}/plugins/collectives/torch_collective.py`), so the input changes."
    ),
    ("torch_collective", "check_collective_all_reduce_mean_is_sum_over_world_size"): (
        "Divergence: `TorchCollective.all_reduce` reduces in place "
        f"(`{_L}/plugins/collectives/torch_collective.py`): the check's `sum` call changed the "
        "tensor its `mean` call then reduced."
    ),
    ("torch_collective", "check_collective_broadcast_rejects_a_source_outside_the_world"): (
        "Divergence: `TorchCollective.broadcast` does not check `src` "
        f"(`{_L}/plugins/collectives/torch_collective.py`); torch's `RuntimeError` arrives as "
        "`CollectiveError`, not `ConfigurationError`."
    ),
    ("torch_collective", "check_collective_scatter_delivers_each_rank_its_tensor"): (
        "Bridge limit: Lightning's `scatter(tensor, scatter_list, src)` needs an output tensor "
        "of the right shape on every rank; trainspec's receiving ranks pass `None`, so the bridge "
        "raises `UnsupportedError`."
    ),
}
"""(target attribute, check name) -> why it fails. ``(attribute, "teardown:*")`` covers the
teardown results of every check, ``(attribute, "*")`` every other failure of that target."""


VOLATILE: Final[dict[str, str]] = {
    "async_checkpoint_io": (
        "Statuses of this target vary from run to run: a load races the background save of "
        "the same path (the divergence analysed below), so whether a given check sees the file "
        "depends on timing. `--check` ignores this section and its row in the summary."
    ),
}
"""Targets whose statuses depend on timing, with the note the page shows."""

RACY: Final[dict[str, frozenset[str]]] = {
    "torch_checkpoint_io": frozenset(
        {
            "check_checkpoint_io_saves_are_atomic_on_another_file_system_than_tmpdir",
            "check_checkpoint_io_killed_save_leaves_old_or_new_checkpoint",
        }
    ),
}
"""Single checks whose status depends on timing (a race the analysis explains); ``--check``
ignores their rows and their target's summary row."""

_VOLATILE_START: Final = "<!-- volatile: statuses depend on timing -->"
_VOLATILE_END: Final = "<!-- /volatile -->"


def _normalized(text: str) -> str:
    """``text`` without the volatile sections and summary rows (what ``--check`` compares)."""
    text = re.sub(
        re.escape(_VOLATILE_START) + r".*?" + re.escape(_VOLATILE_END), "", text, flags=re.S
    )
    for checks in RACY.values():
        for check in checks:
            text = re.sub(rf"^.*`{check}`.*\n", "", text, flags=re.M)
    for attribute in (*VOLATILE, *RACY):
        anchor = attribute.replace("_", "-")
        text = re.sub(rf"^.*\]\(#{anchor}\).*$", anchor, text, flags=re.M)
    return text


def _analysis(attribute: str, check: str) -> str | None:
    if (attribute, check) in ANALYSIS:
        return ANALYSIS[(attribute, check)]
    if check.startswith("teardown:") and (attribute, "teardown:*") in ANALYSIS:
        return ANALYSIS[(attribute, "teardown:*")]
    return ANALYSIS.get((attribute, "*"))


_CLAUSE_ID: Final = re.compile(r"(?<![\w\-\[#])([A-Z][A-Z0-9]*-\d+)(?![\w-])")


def _spec_clauses() -> set[str]:
    spec = PAGE.parent.parent / "spec.md"
    return set(re.findall(r"^###\s+([A-Z][A-Z0-9]*-\d+)\b", spec.read_text(), re.M))


def _link(text: str, clauses: set[str]) -> str:
    """``text`` with every clause ID outside inline code linked to its clause in the spec."""
    parts = re.split(r"(`[^`]*`)", text)
    for i, part in enumerate(parts):
        if not part.startswith("`"):
            parts[i] = _CLAUSE_ID.sub(
                lambda m: f"[{m[1]}](../spec.md#{m[1].lower()})" if m[1] in clauses else m[1],
                part,
            )
    return "".join(parts)


def _run() -> list[tuple[object, object]]:
    from trainspec.bridges.lightning.targets import TARGETS
    from trainspec.conformance import verify
    from trainspec.conformance.distributed import verify_distributed

    rows: list[tuple[object, object]] = []
    for entry in TARGETS:
        if entry.world_size is None:
            report = verify(entry.target)
        else:
            report = verify_distributed(
                (entry.kind, f"trainspec.bridges.lightning.targets:{entry.attribute}"),
                world_size=entry.world_size,
            )
        rows.append((entry, report.targets[0]))
        print(f"{entry.attribute}: {report.targets[0].summary}", file=sys.stderr)
    return rows


def _render(rows: list[tuple[object, object]]) -> tuple[str, list[str]]:
    import lightning

    clauses = _spec_clauses()
    unexplained: list[str] = []
    out: list[str] = [
        "# Lightning 2.6 built-ins under the conformance kit",
        "",
        "<!-- Generated by scripts/lightning_compat.py; do not edit by hand. -->",
        "",
        f"Lightning {lightning.__version__}: every CPU built-in plugin, wrapped with "
        "`trainspec.bridges.lightning` (which adds no behaviour) and verified by the kit. "
        "Each failure is analysed below its table: a real divergence of Lightning from the "
        "spec (with the Lightning source that shows it), or a limit of the bridge where "
        "Lightning has no counterpart. Reproduce any row with the command above its table.",
        "",
        "| target | passed | failed | skipped |",
        "| --- | ---: | ---: | ---: |",
    ]
    for entry, report in rows:
        summary = report.summary  # type: ignore[attr-defined]
        out.append(
            f"| [{report.name}](#{entry.attribute.replace('_', '-')}) | "  # type: ignore[attr-defined]
            f"{summary.passed} | {summary.failed + summary.error} | {summary.skipped} |"
        )
    for entry, report in rows:
        world = f" --world-size {entry.world_size}" if entry.world_size else ""  # type: ignore[attr-defined]
        out += [
            "",
            f"## {entry.attribute}",  # type: ignore[attr-defined]
            "",
            f"{report.name}: `trainspec verify {entry.kind} "  # type: ignore[attr-defined]
            f"trainspec.bridges.lightning.targets:{entry.attribute}{world}`",  # type: ignore[attr-defined]
            "",
        ]
        volatile = VOLATILE.get(entry.attribute)  # type: ignore[attr-defined]
        if volatile is not None:
            out += [f"!!! note\n    {volatile}", "", _VOLATILE_START, ""]
        out += ["| clause | check | status |", "| --- | --- | --- |"]
        failures: list[str] = []
        for result in report.results:  # type: ignore[attr-defined]
            clause = _link(result.clause, clauses)
            out.append(f"| {clause} | `{result.check}` | {result.status} |")
            if result.status in ("failed", "error"):
                analysis = _analysis(entry.attribute, result.check)  # type: ignore[attr-defined]
                if analysis is None:
                    unexplained.append(f"{entry.attribute}: {result.check}: {result.message[:300]}")  # type: ignore[attr-defined]
                    analysis = "**not analysed yet**"
                failures.append(f"- **{clause}** `{result.check}`: {_link(analysis, clauses)}")
        if failures:
            out += ["", "Failures:", "", *failures]
        if volatile is not None:
            out += ["", _VOLATILE_END]
    return "\n".join(out) + "\n", unexplained


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--check", action="store_true", help="exit 1 if the page is stale")
    parser.add_argument("--output", type=Path, default=PAGE)
    args = parser.parse_args(argv)
    text, unexplained = _render(_run())
    for line in unexplained:
        print(f"UNEXPLAINED: {line}", file=sys.stderr)
    if args.check:
        current = args.output.read_text() if args.output.exists() else ""
        if _normalized(current) != _normalized(text):
            print(f"{args.output} is stale: rerun scripts/lightning_compat.py", file=sys.stderr)
            return 1
    else:
        args.output.write_text(text)
    return 1 if unexplained else 0


if __name__ == "__main__":
    raise SystemExit(main())
