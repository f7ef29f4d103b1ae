"""docs/benchmarks.md keeps its hand-written text when benchmarks.run_all rewrites it."""

from __future__ import annotations

from pathlib import Path

from benchmarks.run_all import BENCHMARKS, update_page

PAGE = Path(__file__).resolve().parents[2] / "docs" / "benchmarks.md"


def test_a_run_replaces_only_its_own_block() -> None:
    page = (
        "# B\n\nintro\n\n## Checkpoint IO\n\nbefore\n\n<!-- run_all: checkpoint_io -->\n\nold "
        "figures\n\n<!-- /run_all: checkpoint_io -->\n\nhand-written after\n"
    )
    updated = update_page(page, {"checkpoint_io": "new figures"})
    assert "old figures" not in updated and "new figures" in updated
    assert updated.startswith("# B\n\nintro\n\n## Checkpoint IO\n\nbefore\n\n")
    assert updated.endswith("<!-- /run_all: checkpoint_io -->\n\nhand-written after\n")
    assert update_page(updated, {"checkpoint_io": "new figures"}) == updated  # idempotent


def test_a_benchmark_without_a_block_gets_a_section_at_the_end() -> None:
    updated = update_page("# B\n\nhand-written\n", {"import_time": "figures"})
    assert updated == (
        "# B\n\nhand-written\n\n## Import time\n\n<!-- run_all: import_time -->\n\nfigures\n\n"
        "<!-- /run_all: import_time -->\n"
    )


def test_the_page_has_one_block_per_benchmark() -> None:
    text = PAGE.read_text(encoding="utf-8")
    for _, module, _ in BENCHMARKS:
        assert text.count(f"<!-- run_all: {module} -->") == 1, module
        assert text.count(f"<!-- /run_all: {module} -->") == 1, module
