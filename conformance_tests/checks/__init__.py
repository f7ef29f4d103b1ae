"""The behaviour checks, one module per kind (``accelerator.py``, ``checkpoint_io.py``, ...).

Each module registers its checks with :func:`trainspec.conformance.check` when imported and
defines ``CAPABILITIES: dict[str, str]`` (capability name -> description) for its kind.
Modules are imported on demand by :func:`trainspec.conformance.core.checks_for`, so importing
this package imports no check and no torch.
"""
