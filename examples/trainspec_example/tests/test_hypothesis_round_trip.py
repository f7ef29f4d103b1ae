"""A plugin's own property test, built on the kit's exported hypothesis strategies.

``trainspec.conformance.hypothesis_strategies`` generates the checkpoints the kit itself
uses (nested containers, every dtype, non-contiguous tensors, views sharing storage) and
``assert_checkpoints_equal`` compares them exactly; a plugin author can add properties of
their own on the same inputs.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from trainspec.conformance.hypothesis_strategies import assert_checkpoints_equal, state_dicts

from trainspec_example import CompressedCheckpointIO


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(state_dicts())
def test_checkpoints_round_trip_at_the_highest_compression_level(
    checkpoint: dict[str, object],
) -> None:
    io = CompressedCheckpointIO(compresslevel=1)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "model.ckpt"
        io.save_checkpoint(checkpoint, path, {"compresslevel": 9})
        assert_checkpoints_equal(checkpoint, io.load_checkpoint(path))
