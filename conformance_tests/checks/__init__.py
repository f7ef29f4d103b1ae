"""The behaviour checks, one module or package per kind (``launcher.py``, ``checkpoint_io/``, ...).

A large kind's checks are a package split by clause group (``checkpoint_io/roundtrip.py``,
``checkpoint_io/atomicity.py``, ...) with its shared helpers in ``_fixtures.py``; the package
re-exports every public name. Each module registers its checks with
:func:`trainspec.conformance.check` when imported. The table of kinds
(:data:`trainspec.conformance.kinds.KIND_TABLE`) lists every module of every kind, and
:func:`trainspec.conformance.core.checks_for` imports exactly those and returns the checks they
define, so importing this package imports no check and no torch. Each kind's capabilities are
described once, in that table; a kind's ``CAPABILITIES`` here is read from it.
"""
