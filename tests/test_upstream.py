"""Upstream SGLang 0.5.23's allocators under the harness: loading, machines, and the findings corpus.

Everything but the version check skips when ``sglang==0.5.23`` is not installed
(``pip install --no-deps sglang==0.5.23``).  Upstream has real findings, so the
machines run with the rules that reach a known finding narrowed, and each known
finding is pinned by its committed trace instead: it must still break its
invariant on upstream and pass on our pools.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from poolfuzz.harness.judge.differential import check_allocators
from poolfuzz.harness.judge.families import family, load_factory, validates_input
from poolfuzz.harness.judge.invariants import InvariantViolation
from poolfuzz.harness.judge.trace import Trace
from poolfuzz.harness.kits.kv.page_moves import FreeKind, PageBatch, build_page_batch, decode_batches, extend_batches
from poolfuzz.harness.machines import run_machine
from poolfuzz.harness.traces.replay import replay_trace
from poolfuzz.harness.traces.schema import load_trace
from poolfuzz.harness.upstream import sources
from poolfuzz.harness.upstream.sglang_files import INSTALL_HINT, SUPPORTED_VERSION, locate_sglang
from poolfuzz.harness.upstream.sglang_modules import load_upstream, unavailable_reason
from poolfuzz.harness.upstream.sources import UpstreamUnavailableError
from tests.processes import python

MISSING = unavailable_reason()
needs_upstream = pytest.mark.skipif(MISSING is not None, reason=f"upstream SGLang unavailable: {MISSING}")

CORPUS = Path(__file__).resolve().parents[1] / "corpus" / "upstream"
TRACES = sorted(CORPUS.glob("*.json"))


def _trace_id(path: Path) -> str:
    return path.stem


@pytest.mark.parametrize("installed", [None, pytest.param("0.5.22", marks=needs_upstream)])  # another version: the
# refusal reads the installed copy's own files, so it needs one
def test_a_missing_or_other_sglang_is_refused_with_the_install_command(installed: str | None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sources, "distribution_version", lambda distribution: installed)
    with pytest.raises(UpstreamUnavailableError, match=SUPPORTED_VERSION) as refused:
        locate_sglang()
    assert INSTALL_HINT in str(refused.value)


@needs_upstream
def test_the_allocator_modules_load_without_leaving_sglang_in_sys_modules() -> None:
    modules = load_upstream()
    assert modules.version == SUPPORTED_VERSION
    assert Path(modules.paged.__file__ or "").parent == modules.root
    assert not [name for name in sys.modules if name == "sglang" or name.startswith("sglang.")]


@needs_upstream
@pytest.mark.parametrize("family_name", ["token_kv", "paged_kv", "mamba_slots"])
def test_each_upstream_target_resolves_and_is_fuzzed_with_valid_calls_only(family_name: str) -> None:
    from poolfuzz.harness.upstream import TARGETS

    factory = load_factory(TARGETS[family_name][0])
    assert not validates_input(factory)


@needs_upstream
def test_upstream_paged_allocator_runs_its_torch_naive_path_on_cpu() -> None:
    from poolfuzz.harness.upstream import PagedKV

    pool = PagedKV(size=16, page_size=4)
    assert pool.inner.use_triton_kernels is False
    cpu = lambda *v: torch.tensor(v, dtype=torch.int64)
    out = pool.alloc_extend(cpu(0, 0), cpu(0, 0), cpu(3, 5), cpu(3, 5), cpu(-1, -1), 8)
    assert out is not None and out.tolist() == [4, 5, 6, 8, 9, 10, 11, 12]
    out = pool.alloc_decode(cpu(4, 6), cpu(4, 6), cpu(6, 13))
    assert out is not None and out.tolist() == [7, 14]
    assert pool.free_pages.tolist() == [4]


FREE_KINDS: tuple[FreeKind, ...] = ("exact", "short", "ample")
PAGED_SIZES = st.integers(min_value=2, max_value=16)


@needs_upstream
@given(
    batch=st.one_of(
        extend_batches(free_kinds=FREE_KINDS, max_batch=16, max_tokens=256),
        decode_batches(free_kinds=FREE_KINDS, max_batch=16, page_size=PAGED_SIZES),
    )
)
def test_upstream_paged_allocator_agrees_with_the_loop_oracle_away_from_page_size_1_decode(batch: PageBatch) -> None:
    from poolfuzz.harness.upstream import PagedKV

    check_allocators(batch, ["naive"], factory=PagedKV)


@needs_upstream
def test_the_differential_oracle_catches_upstream_page_size_1_decode() -> None:
    from poolfuzz.harness.upstream import PagedKV

    batch = build_page_batch(1, [1], [2], free_kind="ample", decode=True)
    with pytest.raises(InvariantViolation) as caught:
        check_allocators(batch, ["naive"], factory=PagedKV)
    assert caught.value.invariant_id == "kernel-agreement"


@needs_upstream
def test_upstream_page_size_1_decode_hands_the_next_alloc_the_same_slot() -> None:
    """The harm behind finding ``paged-decode-page-size-1``, shown on upstream directly."""
    from poolfuzz.harness.upstream import PagedKV

    pool = PagedKV(size=4, page_size=1)
    cpu = lambda *v: torch.tensor(v, dtype=torch.int64)
    prompt = pool.alloc_extend(cpu(0), cpu(0), cpu(1), cpu(1), cpu(-1), 1)
    assert prompt is not None and prompt.tolist() == [1]
    decoded = pool.alloc_decode(cpu(2), cpu(2), cpu(1))
    other = pool.alloc(1)
    assert decoded is not None and other is not None
    assert decoded.tolist() == other.tolist() == [2]


@needs_upstream
def test_upstream_mamba_clear_lets_a_stale_reservation_give_one_slot_twice() -> None:
    """The harm behind finding ``mamba-clear-keeps-reservation``, shown on upstream directly."""
    from poolfuzz.harness.upstream import MambaSlots

    pool = MambaSlots(size=3)
    pool.alloc_group_begin(1)
    pool.clear()
    first, second = pool.alloc(1), pool.alloc(1)
    assert first is not None and second is not None
    assert first.tolist() == second.tolist() == [1]


@needs_upstream
@pytest.mark.parametrize("family_name", ["token_kv", "paged_kv", "mamba_slots"])
def test_each_machine_finds_nothing_on_upstream_away_from_the_known_findings(family_name: str) -> None:
    from poolfuzz.harness.upstream import TARGETS
    from poolfuzz.harness.upstream.findings import machine_avoiding_known_findings

    run_machine(machine_avoiding_known_findings(family_name, TARGETS[family_name][0]))


@needs_upstream
def test_every_trace_names_a_known_finding_and_every_finding_has_a_trace() -> None:
    from poolfuzz.harness.upstream.findings import FINDINGS_BY_KEY

    shown: set[str] = set()
    for trace in map(load_trace, TRACES):
        finding = FINDINGS_BY_KEY[trace.provenance["finding"]]
        assert (trace.family, trace.expect["invariant"]) in {(finding.family, i) for i in finding.invariants}
        shown.add(finding.key)
    assert shown == set(FINDINGS_BY_KEY), f"known findings without a trace in {CORPUS}: {set(FINDINGS_BY_KEY) - shown}"


@needs_upstream
@pytest.mark.parametrize("path", TRACES, ids=_trace_id)
def test_each_finding_still_breaks_upstream_and_passes_on_our_pools(path: Path) -> None:
    trace: Trace = load_trace(path)
    assert trace.expect["implementation"] == trace.implementation, "a finding names the upstream target it broke"
    on_upstream = replay_trace(trace)
    if on_upstream.outcome == "unavailable":  # e.g. a vLLM finding where only SGLang is installed
        pytest.skip(on_upstream.describe())
    assert (on_upstream.outcome, on_upstream.invariant) == ("violation", trace.expect["invariant"]), on_upstream.describe()
    ours = replay_trace(trace, target=family(trace.family).default)
    assert ours.outcome == "pass", ours.describe()


REPRODUCTIONS = sorted(CORPUS.glob("repro_*.py"))


@pytest.mark.parametrize("script", REPRODUCTIONS, ids=lambda p: p.stem)
def test_each_standalone_reproduction_reproduces_without_importing_the_harness(script: Path) -> None:
    """Each script, and the sibling loaders (``_wheel_*.py``) it may import, imports nothing of ours; run alone it prints
    REPRODUCED and exits 1.  A ``repro_vllm_*`` script needs vLLM installed, the others SGLang."""

    from poolfuzz.harness.upstream.vllm_files import vllm_unavailable_reason

    missing = vllm_unavailable_reason() if script.stem.startswith("repro_vllm_") else MISSING
    if missing is not None:
        pytest.skip(f"upstream unavailable: {missing}")
    source = script.read_text() + "".join(loader.read_text() for loader in sorted(CORPUS.glob("_wheel_*.py")))
    imported = {line.split()[1].split(".")[0] for line in source.splitlines() if line.startswith(("import ", "from "))}
    assert not imported & {"poolfuzz", "harness"}, imported
    done = python(str(script), cwd=script.parent, timeout=120)
    assert done.returncode == 1 and "REPRODUCED" in done.stdout, done.stdout + done.stderr


class _RecordingInner:
    """A fake upstream object: records the calls it gets and returns a marker."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[object, ...], dict[str, object]]] = []

    def __getattr__(self, name: str) -> object:
        def record(*args: object, **kwargs: object) -> str:
            self.calls.append((name, args, kwargs))
            return f"{name} result"

        return record


def test_a_forwarded_method_passes_its_arguments_unchanged_and_shows_the_protocols_signature() -> None:
    import inspect

    from poolfuzz.harness.upstream.wrapper import ExtendDecodeForwarding
    from poolfuzz.pools.protocols import PagedKVAllocator

    wrapper = ExtendDecodeForwarding()
    wrapper.inner = inner = _RecordingInner()
    lens = torch.tensor([3])
    assert wrapper.alloc_decode(lens, lens, last_loc=lens) == "alloc_decode result"
    assert inner.calls == [("alloc_decode", (lens, lens), {"last_loc": lens})]
    assert inspect.signature(ExtendDecodeForwarding.alloc_extend) == inspect.signature(PagedKVAllocator.alloc_extend)
