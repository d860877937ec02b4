"""Every failure on an upstream target is classified: reachable, latent or divergence (issue #26)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from poolfuzz.harness.judge.families import FAMILIES, family, load_factory, resolve
from poolfuzz.harness.traces.schema import load_trace
from poolfuzz.harness.upstream.classify import classify
from poolfuzz.harness.upstream.findings import KNOWN_FINDINGS, known_finding_filter


def _trace(tmp_path: Path, config: dict[str, object], ops: list[str]) -> str:
    path = tmp_path / "trace.json"
    path.write_text(json.dumps({"config": config, "steps": [{"op": op, "args": {}} for op in ops]}))
    return str(path)


def test_an_engine_violation_is_reachable_and_names_the_iteration_kinds(tmp_path: Path) -> None:
    trace = _trace(tmp_path, {"cache": "unified-rust"}, ["arrive", "iterate", "run"])
    found = classify("engine", "poolfuzz.harness.upstream:Engine", "kv-accounting", trace)
    assert found is not None and found.kind == "reachable" and "arrive, iterate, run" in found.note


def test_an_engine_violation_on_the_legacy_radix_cache_is_latent(tmp_path: Path) -> None:
    trace = _trace(tmp_path, {"cache": "radix"}, ["iterate"])
    found = classify("engine", "poolfuzz.harness.upstream:Engine", "kv-accounting", trace)
    assert found is not None and found.kind == "latent" and "registry.py" in found.note


def test_a_lone_upstream_class_is_latent_and_a_disagreement_is_a_divergence() -> None:
    assert classify("paged_kv", "poolfuzz.harness.upstream:PagedKV", "empty-pool-guard", None).kind == "latent"  # type: ignore[union-attr]
    assert classify("engine", "poolfuzz.harness.upstream:Engine", "checker-agreement", None).kind == "divergence"  # type: ignore[union-attr]


def test_our_own_pools_and_errors_are_not_classified() -> None:
    assert classify("paged_kv", "poolfuzz.pools:PagedTokenToKVPoolAllocator", "empty-pool-guard", None) is None
    assert classify("engine", "poolfuzz.harness.upstream:Engine", None, None) is None


UPSTREAM_FINDINGS = sorted((Path(__file__).resolve().parents[1] / "corpus" / "upstream").glob("*.json"))


@pytest.mark.parametrize("path", UPSTREAM_FINDINGS, ids=lambda p: p.stem)
def test_each_finding_trace_takes_a_step_its_kits_known_findings_filter_withholds(path: Path) -> None:
    """The kit's ``known_findings`` filter (what ``machine_avoiding_known_findings`` withholds) refuses a step of
    every committed upstream finding, replayed on our own pool, before the finding's step."""
    trace = load_trace(path)
    keep = known_finding_filter(trace.family)
    assert keep is not None, f"{trace.family} has a known finding but its kit declares no known_findings filter"
    fam = family(trace.family)
    driver = resolve(fam.driver)(load_factory(fam.default), trace.config, check_misuse=False)
    for step in trace.steps:
        if not keep.allows(driver, step["op"], step["args"]):
            return
        driver.step(step["op"], **step["args"])
    pytest.fail(f"no step of {path.name} is withheld by {fam.known_findings}")


def test_every_family_with_a_known_finding_declares_its_filter_and_no_other_does() -> None:
    with_findings = {finding.family for finding in KNOWN_FINDINGS}
    assert {name for name in FAMILIES if known_finding_filter(name) is not None} == with_findings
