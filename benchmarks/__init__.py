"""Side-by-side benchmarks (not tests). Run each module with ``python -m benchmarks.<name>``."""
