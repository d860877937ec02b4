"""Every failure on an upstream target is classified: reachable, latent or divergence (issue #26)."""

from __future__ import annotations

import json
from pathlib import Path

from harness.upstream.classify import classify


def _trace(tmp_path: Path, config: dict[str, object], ops: list[str]) -> str:
    path = tmp_path / "trace.json"
    path.write_text(json.dumps({"config": config, "steps": [{"op": op, "args": {}} for op in ops]}))
    return str(path)


def test_an_engine_violation_is_reachable_and_names_the_iteration_kinds(tmp_path: Path) -> None:
    trace = _trace(tmp_path, {"cache": "unified-rust"}, ["arrive", "iterate", "run"])
    found = classify("engine", "harness.upstream:Engine", "kv-accounting", trace)
    assert found is not None and found.kind == "reachable" and "arrive, iterate, run" in found.note


def test_an_engine_violation_on_the_legacy_radix_cache_is_latent(tmp_path: Path) -> None:
    trace = _trace(tmp_path, {"cache": "radix"}, ["iterate"])
    found = classify("engine", "harness.upstream:Engine", "kv-accounting", trace)
    assert found is not None and found.kind == "latent" and "registry.py" in found.note


def test_a_lone_upstream_class_is_latent_and_a_disagreement_is_a_divergence() -> None:
    assert classify("paged_kv", "harness.upstream:PagedKV", "empty-pool-guard", None).kind == "latent"  # type: ignore[union-attr]
    assert classify("engine", "harness.upstream:Engine", "checker-agreement", None).kind == "divergence"  # type: ignore[union-attr]


def test_our_own_pools_and_errors_are_not_classified() -> None:
    assert classify("paged_kv", "pools:PagedTokenToKVPoolAllocator", "empty-pool-guard", None) is None
    assert classify("engine", "harness.upstream:Engine", None, None) is None
