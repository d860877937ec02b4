"""The pieces of the machine-coverage measurement (``poolfuzz coverage``; the suite's own check is
``tests/machine_coverage.py``, which measures the machine tests as the suite runs them and fails the
run below 97% of the CPU-reachable branches of ``pools/``).
"""

from __future__ import annotations

from pathlib import Path

from poolfuzz.harness.bench.coverage import REQUIRED, FileCoverage, Measurement, _ranges, combined, record_imports


def test_importing_pools_alone_is_far_from_the_requirement_so_the_suites_check_has_teeth(tmp_path: Path) -> None:
    """The import pass (module-level lines only) is what the machine tests' data is combined with: alone it
    must not reach the requirement, or the session check could pass with no machine test measured."""
    record_imports(tmp_path)
    result = combined(tmp_path, 0.0)
    assert {f.path for f in result.files} >= {"pools/kv_allocator.py", "pools/radix_cache.py", "pools/swa.py"}
    assert 20.0 < result.total < REQUIRED - 30, result.table()


def test_the_total_weighs_statements_and_branches_as_coverage_does() -> None:
    files = (FileCoverage("pools/a.py", 10, 1, 4, 1, "3, 5->7"), FileCoverage("pools/b.py", 6, 0, 0, 0, ""))
    result = Measurement(files, 1.0)
    assert round(result.total, 4) == round(100 * (20 - 2) / 20, 4)
    assert files[0].percent == 100 * 12 / 14
    table = result.table(missing=True)
    assert "| `pools/a.py` | 10 | 1 | 4 | 1 | 85.7% | 3, 5->7 |" in table
    assert "**90.0%**" in table


def test_missed_lines_are_shown_as_ranges() -> None:
    assert _ranges([94, 98, 99, 100, 103, 105, 106]) == ["94", "98-100", "103", "105-106"]
