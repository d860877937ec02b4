"""Unit tests of ``poolfuzz.pools.swa``: the SWA hybrid allocator (page size 1 and > 1) and the pure-SWA one.

Every test runs on each device of ``tests.conftest.DEVICES`` (CUDA variants skip
without a GPU).  ``assert_mapping_sound`` states the mapping invariants of the
module docstring and runs after every call that changes the allocator.
"""

from __future__ import annotations

import random
from typing import Any

import pytest
import torch

from poolfuzz.pools import errors
from poolfuzz.pools.swa import PureSWATokenToKVPoolAllocator, SWATokenToKVPoolAllocator
from tests.conftest import DEVICES
from tests.indices import idx, ints

PS = 4


@pytest.fixture(params=DEVICES)
def device(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def make(device: str, full_pages: int = 6, swa_pages: int = 4, ps: int = PS, **kwargs: Any) -> SWATokenToKVPoolAllocator:
    return SWATokenToKVPoolAllocator(full_pages * ps, swa_pages * ps, ps, device, **kwargs)


def mapping(alloc: SWATokenToKVPoolAllocator, slots: list[int]) -> list[int]:
    return ints(alloc.translate_loc_from_full_to_swa(idx(slots, alloc.device)))


def extend(alloc: SWATokenToKVPoolAllocator, pres: list[int], seqs: list[int], lasts: list[int]) -> torch.Tensor | None:
    dev = alloc.device
    pre, seq = idx(pres, "cpu"), idx(seqs, "cpu")
    return alloc.alloc_extend(pre.to(dev), pre, seq.to(dev), seq, idx(lasts, dev), sum(seqs) - sum(pres))


def tail(alloc: SWATokenToKVPoolAllocator, pre: int, seq: int, last: int, swa_tail_len: int) -> torch.Tensor | None:
    dev = alloc.device
    pre_t, seq_t = idx([pre], "cpu"), idx([seq], "cpu")
    return alloc.alloc_extend_swa_tail(pre_t.to(dev), pre_t, seq_t.to(dev), seq_t, idx([last], dev), seq - pre, swa_tail_len)


def decode(alloc: SWATokenToKVPoolAllocator, seqs: list[int], lasts: list[int]) -> torch.Tensor | None:
    seq = idx(seqs, "cpu")
    return alloc.alloc_decode(seq.to(alloc.device), seq, idx(lasts, alloc.device))


def snapshot(alloc: SWATokenToKVPoolAllocator | PureSWATokenToKVPoolAllocator) -> tuple[Any, ...]:
    """Everything a refused call must leave as it was."""
    sides = [
        (ints(side.free_pages), ints(side.get_all_free_pages()), ints(side.pending_free_pages()))
        for side in (alloc.full_attn_allocator, alloc.swa_attn_allocator)
    ]
    return sides, ints(alloc.full_to_swa_index_mapping), alloc.in_free_group, alloc.available_size()


def alloc_is_pristine(alloc: SWATokenToKVPoolAllocator) -> bool:
    return alloc.full_available_size() == alloc.size_full and alloc.swa_available_size() == alloc.size_swa


def assert_mapping_sound(alloc: SWATokenToKVPoolAllocator) -> None:
    """Free full slots map to 0; mapped slots pair page for page with the live SWA pages, one to one."""
    ps = alloc.page_size
    table = ints(alloc.full_to_swa_index_mapping)
    assert table[-1] == -1 and len(table) == alloc.size_full + ps + 1
    full, swa = alloc.full_attn_allocator, alloc.swa_attn_allocator
    free_full = {0, *ints(full.get_all_free_pages()), *ints(full.pending_free_pages())}
    live_swa = set(range(1, swa.num_pages + 1)) - set(ints(swa.get_all_free_pages())) - set(ints(swa.pending_free_pages()))
    peer_pages: dict[int, set[int]] = {}
    for slot, peer in enumerate(table[:-1]):
        assert peer >= 0, f"full slot {slot} maps to {peer}"
        if slot // ps in free_full:
            assert peer == 0, f"free full slot {slot} still maps to SWA slot {peer}"
        elif peer:
            assert peer % ps == slot % ps, f"full slot {slot} -> SWA slot {peer}: offsets differ"
            peer_pages.setdefault(slot // ps, set()).add(peer // ps)
    peers = [s for s in table[:-1] if s]
    assert len(peers) == len(set(peers)), "an SWA slot is mapped twice"
    assert all(len(pages) == 1 for pages in peer_pages.values()), f"a full page spans SWA pages: {peer_pages}"
    owned = [next(iter(pages)) for pages in peer_pages.values()]
    assert len(owned) == len(set(owned)), "two full pages share an SWA page"
    assert set(owned) == live_swa, f"mapped SWA pages {sorted(owned)} != live SWA pages {sorted(live_swa)}"


# ------------------------------------------------------------ sizes, regimes
def test_sizes_are_reported_per_side_and_the_smaller_one_bounds_the_pool(device: str) -> None:
    alloc = make(device, full_pages=6, swa_pages=4)
    assert (alloc.size, alloc.size_full, alloc.size_swa) == (16, 24, 16)
    assert (alloc.available_size(), alloc.full_available_size(), alloc.swa_available_size()) == (16, 24, 16)
    assert alloc.new_pages_available(4, 4) and not alloc.new_pages_available(5, 5)
    extend(alloc, [0], [8], [-1])
    assert (alloc.available_size(), alloc.full_available_size(), alloc.swa_available_size()) == (8, 16, 8)


def test_each_page_regime_rejects_the_other_regimes_calls(device: str) -> None:
    flat, paged = make(device, ps=1), make(device)
    for call in (lambda: extend(flat, [0], [1], [-1]), lambda: decode(flat, [1], [-1]), lambda: tail(flat, 0, 1, -1, 1)):
        with pytest.raises(errors.BadSizeError):
            call()
    with pytest.raises(errors.BadSizeError):
        paged.alloc(PS)
    assert alloc_is_pristine(flat) and alloc_is_pristine(paged)


def test_translation_keeps_minus_one_and_reads_zero_for_slots_without_a_peer(device: str) -> None:
    alloc = make(device)
    full = ints(extend(alloc, [0], [3], [-1]))
    assert mapping(alloc, [-1, 0, full[0] + 3]) == [-1, 0, 0] and all(mapping(alloc, full))


# --------------------------------------------------------------- page size 1
def test_alloc_pairs_every_full_slot_with_its_own_swa_slot(device: str) -> None:
    alloc = make(device, full_pages=6, swa_pages=4, ps=1)
    first, second = ints(alloc.alloc(3)), ints(alloc.alloc(1))
    assert first + second == [1, 2, 3, 4] and mapping(alloc, first + second) == [1, 2, 3, 4]
    assert ints(alloc.alloc(0)) == []
    assert_mapping_sound(alloc)


@pytest.mark.parametrize(("full_slots", "swa_slots"), [(3, 5), (5, 3)], ids=["full-short", "swa-short"])
def test_alloc_refuses_when_either_side_is_short_and_takes_nothing(full_slots: int, swa_slots: int, device: str) -> None:
    alloc = SWATokenToKVPoolAllocator(full_slots, swa_slots, 1, device)
    before = snapshot(alloc)
    assert alloc.alloc(4) is None and snapshot(alloc) == before
    with pytest.raises(errors.BadSizeError):
        alloc.alloc(-1)
    assert snapshot(alloc) == before


# ------------------------------------------------------- extend and decode
def test_extend_and_decode_pair_full_and_swa_pages_at_the_same_offsets(device: str) -> None:
    alloc = make(device, full_pages=6, swa_pages=5)
    first = ints(extend(alloc, [0, 0], [6, 2], [-1, -1]))
    assert_mapping_sound(alloc)
    grown = ints(extend(alloc, [6], [9], [first[5]]))  # finishes the prefix's partial page on both sides
    assert mapping(alloc, grown[:2]) == [mapping(alloc, first[5:6])[0] + 1, mapping(alloc, first[5:6])[0] + 2]
    step = ints(decode(alloc, [10, 3], [grown[-1], first[-1]]))
    assert step[1] == first[-1] + 1 and mapping(alloc, step[1:]) == [mapping(alloc, first[-1:])[0] + 1]
    assert_mapping_sound(alloc)


def test_extend_refuses_when_the_swa_side_is_short_and_neither_side_changes(device: str) -> None:
    alloc = make(device, full_pages=6, swa_pages=2)
    extend(alloc, [0], [4], [-1])
    before = snapshot(alloc)
    assert extend(alloc, [0], [5], [-1]) is None
    assert snapshot(alloc) == before


def test_decode_is_all_or_nothing_when_only_the_swa_side_is_short(device: str) -> None:
    """Upstream ran the full side first and left its pages consumed when the SWA side returned None."""
    alloc = make(device, full_pages=6, swa_pages=2)
    slots = ints(extend(alloc, [0, 0], [4, 4], [-1, -1]))
    before = snapshot(alloc)
    assert alloc.full_available_size() == 16 and decode(alloc, [5, 5], [slots[3], slots[7]]) is None
    assert snapshot(alloc) == before
    assert_mapping_sound(alloc)


def assert_continuing_is_rejected_unchanged(alloc: SWATokenToKVPoolAllocator, pre: int, last: int) -> None:
    """A decode (to ``pre + 1`` tokens) and an extend (to ``pre + 2``) of a ``pre``-token prefix whose last
    slot is given as ``last``: each a ``BadBatchError`` that leaves the allocator as it was."""
    before = snapshot(alloc)
    with pytest.raises(errors.BadBatchError):
        decode(alloc, [pre + 1], [last])
    with pytest.raises(errors.BadBatchError):
        extend(alloc, [pre], [pre + 2], [last])
    assert snapshot(alloc) == before


def test_continuing_a_prefix_whose_last_token_left_the_window_is_rejected_unchanged(device: str) -> None:
    alloc = make(device)
    slots = ints(extend(alloc, [0], [8], [-1]))
    alloc.free_swa(idx(slots[4:], device))
    assert_continuing_is_rejected_unchanged(alloc, 8, slots[7])


def test_a_request_without_a_prefix_must_pass_last_loc_minus_one(device: str) -> None:
    alloc = make(device)
    mapped = ints(extend(alloc, [0], [3], [-1]))
    assert_continuing_is_rejected_unchanged(alloc, 0, mapped[2])


@pytest.mark.parametrize(
    ("pres", "seqs", "lasts", "count"),
    [
        ([2], [1], [-1], -1),  # seq_len below prefix_len
        ([0], [5], [-1], 4),  # extend_num_tokens does not match the lengths
        ([0], [5], [-1, -1], 5),  # last_loc of the wrong shape
    ],
    ids=["seq-below-prefix", "token-count", "last-loc-shape"],
)
def test_a_malformed_extend_raises_before_either_side_changes(
    pres: list[int], seqs: list[int], lasts: list[int], count: int, device: str
) -> None:
    alloc = make(device)
    pre, seq = idx(pres, "cpu"), idx(seqs, "cpu")
    before = snapshot(alloc)
    with pytest.raises(errors.BadBatchError):
        alloc.alloc_extend(pre.to(device), pre, seq.to(device), seq, idx(lasts, device), count)
    assert snapshot(alloc) == before


def test_need_sort_counts_staged_pages_on_both_sides_and_merges_them_when_short(device: str) -> None:
    alloc = make(device, full_pages=2, swa_pages=2, need_sort=True)
    slots = ints(extend(alloc, [0], [8], [-1]))
    alloc.free(idx(slots, device))
    assert alloc.available_size() == 8 and ints(alloc.full_attn_allocator.free_pages) == []
    again = ints(extend(alloc, [0], [8], [-1]))
    assert sorted(again) == sorted(slots)
    assert_mapping_sound(alloc)


# --------------------------------------------------------------- swa tail
def test_the_swa_tail_maps_only_the_tail_and_zeroes_the_rest_of_the_extend(device: str) -> None:
    """SGLang #25805: the non-tail full slots kept stale entries from their previous owner."""
    alloc = make(device, full_pages=4, swa_pages=4)
    old = ints(extend(alloc, [0], [12], [-1]))
    alloc.free(idx(old, device))
    full = ints(tail(alloc, 0, 10, -1, swa_tail_len=6))  # positions 4..9 are the tail: pages 1 and 2 of the request
    assert set(full) <= set(old), "the test needs the freed slots to be reused"
    table = mapping(alloc, full)
    assert table[:4] == [0, 0, 0, 0] and all(table[4:]) and alloc.swa_available_size() == 8
    assert_mapping_sound(alloc)
    more = ints(decode(alloc, [11], [full[-1]]))
    assert mapping(alloc, more) == [table[-1] + 1]


def test_an_empty_swa_tail_allocates_the_full_side_only(device: str) -> None:
    alloc = make(device)
    full = ints(tail(alloc, 0, 8, -1, swa_tail_len=0))
    assert mapping(alloc, full) == [0] * 8 and alloc.swa_available_size() == alloc.size_swa
    assert_mapping_sound(alloc)


@pytest.mark.parametrize(("seq", "swa_tail_len"), [(10, 5), (10, 11), (10, -1)], ids=["unaligned", "too-long", "negative"])
def test_an_impossible_swa_tail_is_rejected_unchanged(seq: int, swa_tail_len: int, device: str) -> None:
    alloc = make(device)
    before = snapshot(alloc)
    with pytest.raises(errors.BadSizeError):
        tail(alloc, 0, seq, -1, swa_tail_len)
    assert snapshot(alloc) == before


def test_the_swa_tail_takes_one_request_and_refuses_when_the_swa_side_is_short(device: str) -> None:
    alloc = make(device, full_pages=6, swa_pages=1)
    dev, two = alloc.device, idx([0, 0], "cpu")
    with pytest.raises(errors.BadBatchError):
        alloc.alloc_extend_swa_tail(two.to(dev), two, idx([1, 1], dev), idx([1, 1], "cpu"), idx([-1, -1], dev), 2, 1)
    before = snapshot(alloc)
    assert tail(alloc, 0, 8, -1, swa_tail_len=8) is None and snapshot(alloc) == before


# ------------------------------------------------------------------ frees
def test_freeing_one_token_of_a_page_frees_and_unmaps_the_whole_page_on_both_sides(device: str) -> None:
    """SGLang #27779: only the freed tokens were unmapped, so the page's other entries freed its SWA page again."""
    alloc = make(device)
    slots = ints(extend(alloc, [0], [8], [-1]))
    alloc.free(idx([slots[1]], device))
    assert mapping(alloc, slots) == [0] * 4 + mapping(alloc, slots[4:]) and all(mapping(alloc, slots[4:]))
    assert alloc.full_available_size() == 20 and alloc.swa_available_size() == 12
    assert_mapping_sound(alloc)


def test_free_swa_releases_the_window_and_free_later_releases_the_rest(device: str) -> None:
    alloc = make(device)
    slots = ints(extend(alloc, [0], [10], [-1]))
    alloc.free_swa(idx(slots[:4] + [slots[5]], device))  # page 1 whole, page 2 through one token
    assert mapping(alloc, slots[:8]) == [0] * 8 and all(mapping(alloc, slots[8:]))
    assert alloc.full_available_size() == 12 and alloc.swa_available_size() == 12
    assert_mapping_sound(alloc)
    alloc.free(idx(slots, device))  # tokens without a peer are fine
    assert alloc_is_pristine(alloc)
    assert_mapping_sound(alloc)


@pytest.mark.parametrize("ps", [1, PS])
def test_free_swa_of_a_slot_that_already_left_the_window_raises_unchanged(ps: int, device: str) -> None:
    alloc = make(device, ps=ps)
    slots = ints(alloc.alloc(3) if ps == 1 else extend(alloc, [0], [6], [-1]))
    alloc.free_swa(idx(slots[:1], device))
    before = snapshot(alloc)
    with pytest.raises(errors.DoubleFreeError):
        alloc.free_swa(idx(slots[:2], device))
    assert snapshot(alloc) == before


@pytest.mark.parametrize("ps", [1, PS])
@pytest.mark.parametrize("op", ["free", "free_swa", "free_full"])
def test_double_foreign_and_padding_frees_raise_typed_errors_unchanged(op: str, ps: int, device: str) -> None:
    alloc = make(device, ps=ps)
    slots = ints(alloc.alloc(2) if ps == 1 else extend(alloc, [0], [2], [-1]))
    alloc.free(idx(slots[:1], device))
    release = getattr(alloc, op)
    before = snapshot(alloc)
    for bad, error in (
        ([slots[0]], errors.DoubleFreeError),
        ([alloc.size_full + ps], errors.ForeignIndexError),
        ([-1], errors.ForeignIndexError),
        ([0], errors.ReservedIndexError),
    ):
        with pytest.raises(error):
            release(idx(bad, device))
        assert snapshot(alloc) == before
    with pytest.raises(errors.BadBatchError):
        release([slots[-1]])
    assert snapshot(alloc) == before


def test_a_slot_named_twice_in_one_free_raises_at_page_size_one(device: str) -> None:
    alloc = make(device, ps=1)
    slots = ints(alloc.alloc(2))
    before = snapshot(alloc)
    with pytest.raises(errors.DoubleFreeError):
        alloc.free(idx([slots[0], slots[0]], device))
    assert snapshot(alloc) == before


@pytest.mark.parametrize("ps", [1, PS])
def test_free_full_is_refused_while_the_swa_peer_lives_and_accepted_after_free_swa(ps: int, device: str) -> None:
    alloc = make(device, ps=ps)
    slots = ints(alloc.alloc(2) if ps == 1 else extend(alloc, [0], [2], [-1]))
    before = snapshot(alloc)
    with pytest.raises(errors.BadBatchError):
        alloc.free_full(idx(slots, device))
    assert snapshot(alloc) == before
    alloc.free_swa(idx(slots, device))
    alloc.free_full(idx(slots, device))
    assert alloc_is_pristine(alloc)


@pytest.mark.parametrize("ps", [1, PS])
def test_a_full_slot_that_left_the_window_cannot_free_the_swa_slot_of_its_successor(ps: int, device: str) -> None:
    """SGLang PR #27586: a stale mapping entry released an SWA slot that had been handed to another request."""
    alloc = make(device, full_pages=4, swa_pages=1, ps=ps)
    old = ints(alloc.alloc(1) if ps == 1 else extend(alloc, [0], [ps], [-1]))
    alloc.free_swa(idx(old, device))
    new = ints(alloc.alloc(1) if ps == 1 else extend(alloc, [0], [ps], [-1]))
    owned = mapping(alloc, new)
    alloc.free(idx(old, device))
    assert mapping(alloc, new) == owned and alloc.swa_available_size() == 0
    assert_mapping_sound(alloc)


# ------------------------------------------------------------- free groups
@pytest.mark.parametrize("ps", [1, PS])
def test_a_free_group_resolves_swa_peers_when_the_free_is_enqueued(ps: int, device: str) -> None:
    alloc = make(device, ps=ps)
    slots = ints(alloc.alloc(4) if ps == 1 else extend(alloc, [0, 0], [4, 4], [-1, -1]))
    half = len(slots) // 2
    peers = mapping(alloc, slots[:half])
    row = idx(slots, device)
    alloc.free_group_begin()
    alloc.free(row[:half])
    assert mapping(alloc, slots[:half]) == [0] * half, "unmapped at enqueue, not at group end"
    row[:half] = row[half:]  # the caller reuses its row: the queued view would now name live slots
    assert ints(alloc.swa_attn_allocator.pending_free_pages()) == sorted({p // ps for p in peers})
    assert alloc.swa_available_size() == alloc.size_swa - len(slots)
    with pytest.raises(errors.DoubleFreeError):
        alloc.free(idx(slots[:1], device))
    with pytest.raises(errors.GroupStateError):
        alloc.free_group_begin()
    alloc.free_group_end()
    assert alloc.swa_available_size() == alloc.size_swa - half and alloc.full_available_size() == alloc.size_full - half
    assert all(mapping(alloc, slots[half:]))
    assert_mapping_sound(alloc)


def test_free_group_end_without_begin_raises(device: str) -> None:
    with pytest.raises(errors.GroupStateError):
        make(device).free_group_end()


def test_clear_frees_both_sides_unmaps_everything_and_closes_the_group(device: str) -> None:
    alloc = make(device, need_sort=True)
    slots = ints(extend(alloc, [0], [9], [-1]))
    alloc.free_group_begin()
    alloc.free(idx(slots[:4], device))
    alloc.clear()
    assert alloc_is_pristine(alloc) and not alloc.in_free_group
    assert ints(alloc.full_to_swa_index_mapping) == [0] * (alloc.size_full + PS) + [-1]
    alloc.free_group_begin()


# ------------------------------------------------------------- random walk
@pytest.mark.parametrize("ps", [1, 2, PS])
def test_a_seeded_walk_of_scheduler_steps_keeps_the_mapping_sound(ps: int, device: str) -> None:
    rng = random.Random(ps)
    alloc = make(device, full_pages=48 // ps, swa_pages=24 // ps, ps=ps)
    rows: list[list[int]] = []  # each request's full slots, by position
    swa_from: list[int] = []  # first position that still has its SWA peer (page aligned)
    for _ in range(120):
        op = rng.choice(["new", "grow", "decode", "window", "finish"])
        if op == "new" or not rows:
            n = rng.randint(1, 9)
            out = alloc.alloc(n) if ps == 1 else extend(alloc, [0], [n], [-1])
            if out is not None:
                rows.append(ints(out))
                swa_from.append(0)
        elif op in ("grow", "decode"):
            i = rng.randrange(len(rows))
            n = 1 if op == "decode" else rng.randint(1, 6)
            pre, seq = len(rows[i]), len(rows[i]) + n
            if ps == 1:
                out = alloc.alloc(n)
            else:
                out = decode(alloc, [seq], rows[i][-1:]) if op == "decode" else extend(alloc, [pre], [seq], rows[i][-1:])
            rows[i] += ints(out) if out is not None else []
        elif op == "window":
            i = rng.randrange(len(rows))
            upto = (len(rows[i]) - 1) // ps * ps  # keep the last token's page
            if upto > swa_from[i]:
                alloc.free_swa(idx(rows[i][swa_from[i] : upto], device))
                swa_from[i] = upto
        else:
            i = rng.randrange(len(rows))
            alloc.free(idx(rows.pop(i), device))
            swa_from.pop(i)
        assert_mapping_sound(alloc)
        live_pages = sum(-(-len(row) // ps) for row in rows)
        assert alloc.full_available_size() == alloc.size_full - live_pages * ps


# ------------------------------------------------------------------- pure
def test_pure_swa_maps_every_slot_to_itself_and_allocates_from_one_pool(device: str) -> None:
    alloc = PureSWATokenToKVPoolAllocator(6, 1, device)
    slots = ints(alloc.alloc(4))
    assert ints(alloc.translate_loc_from_full_to_swa(idx(slots, device))) == slots
    assert ints(alloc.full_to_swa_index_mapping) == list(range(7)) + [-1]
    assert alloc.size == alloc.size_full == alloc.size_swa == 6
    assert alloc.available_size() == alloc.full_available_size() == alloc.swa_available_size() == 2
    assert alloc.alloc(3) is None and alloc.new_pages_available(2, 2) and not alloc.new_pages_available(3, 0)


def test_pure_swa_free_drops_padding_rejects_double_frees_and_ignores_free_full(device: str) -> None:
    alloc = PureSWATokenToKVPoolAllocator(4, device=device)
    slots = ints(alloc.alloc(3))
    alloc.free_full(idx(slots, device))
    assert alloc.available_size() == 1
    alloc.free(idx([0, -1, slots[0]], device))
    alloc.free_swa(idx([slots[1]], device))
    before = snapshot(alloc)
    with pytest.raises(errors.DoubleFreeError):
        alloc.free(idx([slots[0]], device))
    with pytest.raises(errors.ForeignIndexError):
        alloc.free(idx([5], device))
    assert snapshot(alloc) == before and alloc.available_size() == 3


def test_pure_swa_defers_frees_in_a_group_and_clears(device: str) -> None:
    alloc = PureSWATokenToKVPoolAllocator(4, device=device)
    row = alloc.alloc(4)
    assert row is not None
    alloc.free_group_begin()
    alloc.free(row[:2])
    row[:2] = row[2:]
    assert alloc.available_size() == 0 and alloc.in_free_group
    alloc.free_group_end()
    assert sorted(ints(alloc.swa_attn_allocator.get_all_free_pages())) == [1, 2]
    alloc.free_group_begin()
    alloc.clear()
    assert alloc.available_size() == 4 and not alloc.in_free_group


def test_pure_swa_rejects_paged_regimes_and_calls(device: str) -> None:
    with pytest.raises(errors.BadSizeError):
        PureSWATokenToKVPoolAllocator(8, 2, device)
    alloc = PureSWATokenToKVPoolAllocator(8, device=device)
    for call in (alloc.alloc_extend, alloc.alloc_decode, alloc.alloc_extend_swa_tail):
        with pytest.raises(errors.BadSizeError):
            call()
    with pytest.raises(errors.PoolError):
        alloc.alloc(-1)
