"""Reference implementations of the trainspec protocols."""
