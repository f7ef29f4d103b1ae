"""The case files under ``cases/`` are inputs for the type checkers, never tests to collect."""

collect_ignore_glob = ["cases/*"]
