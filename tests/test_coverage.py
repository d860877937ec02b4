"""The machine tests alone reach at least 97% of the CPU-reachable branches of ``pools/`` (``poolfuzz coverage``).

The measurement runs ``tests/test_machines.py`` and ``tests/test_scheduler_machine.py``
under ``coverage`` in a subprocess with ``CI=true``, one file after the other (about 80 s);
the table it fails with names every file's missed lines and arcs.
"""

from __future__ import annotations

from poolfuzz.harness.bench.coverage import REQUIRED, FileCoverage, Measurement, _ranges, measure


def test_the_machine_tests_alone_reach_the_required_branch_coverage_of_pools() -> None:
    # One file at a time: under ``pytest -n auto`` the other workers already use the other cores.
    result = measure(jobs=1)
    assert {f.path for f in result.files} >= {"pools/kv_allocator.py", "pools/radix_cache.py", "pools/swa.py"}
    assert result.total >= REQUIRED, f"{result.total:.2f}% < {REQUIRED}%\n{result.table(missing=True)}"


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
