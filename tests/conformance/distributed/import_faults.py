"""A factory whose module, in the ranks of a world started with
``TRAINSPEC_TEST_FAULT_AT_IMPORT`` set, kills (``exit``) or hangs (``hang``) the rank that
imports it: rank 0 dies or hangs while the harness loads the factory (issue 17, item 6).
Anywhere else it imports like any module."""

from __future__ import annotations

import os
import time

from trainspec.reference.collectives.torch_dist import TorchCollective

__all__ = ["torch_collective"]

_FAULT = os.environ.get("TRAINSPEC_TEST_FAULT_AT_IMPORT", "") if "RANK" in os.environ else ""
if _FAULT == "exit":
    os._exit(7)
while _FAULT == "hang":
    time.sleep(0.05)


def torch_collective() -> TorchCollective:
    """The reference collective, defined here so that the ranks import this module."""
    return TorchCollective()
