"""Draws for the Mamba families: configs, slot counts, group sizes and raw slot numbers.

Pools are tiny (0, 1 and 2 slots are where boundary bugs live).  For the
hybrid pool ``mamba_size`` is drawn around ``size``: smaller, equal and larger,
because a mapping sized by ``mamba_size`` only goes out of bounds when the
request rows outnumber the slots (SGLang #24244), and the all-or-nothing check
only matters on the side that runs short first.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from hypothesis import strategies as st
from hypothesis.strategies import SearchStrategy

from strategies.mamba_catalogue import hybrid_catalogue, mamba_slot_catalogue
from strategies.table import pool_size as sample_pool_size, MoveTable, CORNER_MIXED, CORNER_REPEAT, Config, Move, Step, with_repeat


def pool_sizes(*, max_size: int = 12) -> SearchStrategy[int]:
    """Tiny pools (0, 1, 2) are where boundary bugs live; a few larger ones keep variety."""
    return st.one_of(st.sampled_from([0, 1, 2, 3]), st.integers(min_value=1, max_value=max_size))


MANY_SLOTS = 70
"""A pool large enough for one ``free`` of more than 64 slots (the allocator's counting path)."""


def mamba_slot_configs(*, max_size: int = 10) -> SearchStrategy[Config]:
    """``MambaSlotAllocator(size, device)`` without ``device`` (the machine adds it); mostly room for a
    reservation of a few slots, often the tiny and boundary sizes."""
    small = st.one_of(st.integers(min_value=2, max_value=6), pool_sizes(max_size=max_size), st.sampled_from([2, 3, 4]))
    # The large pool rides on its own draw, 3 of 0..3: a fourth of the examples, and shrinking (toward 0) makes
    # it small.  As a fourth branch of the one_of, the ci profile's 40 examples never drew it.
    sizes = st.builds(lambda big, size: MANY_SLOTS if big else size, st.integers(0, 3).map(lambda k: k == 3), small)
    return st.fixed_dictionaries({"size": sizes})


def hybrid_configs(*, max_size: int = 8) -> SearchStrategy[Config]:
    """``HybridReqToTokenPool(size, max_context_len, mamba_size)`` with ``mamba_size`` within 3 of ``size``."""

    def build(size: int, offset: int, max_context_len: int) -> Config:
        return {"size": size, "max_context_len": max_context_len, "mamba_size": max(0, size + offset)}

    offsets = st.sampled_from([-1, 1, 0, -2, 2, -3, 3])
    return st.builds(build, pool_sizes(max_size=max_size), offsets, st.sampled_from([4, 8]))


def slot_counts(*, misuse: bool, max_count: int = 4) -> SearchStrategy[int]:
    """``alloc(need_size)`` sizes, 0 included (the negative-zero slice, seed 000); -1 only with ``misuse``."""
    return st.integers(min_value=-1 if misuse else 0, max_value=max_count)


def group_sizes(*, misuse: bool, max_reqs: int = 6) -> SearchStrategy[int]:
    """``alloc_group_begin(num_reqs)``: mostly 1..3 (a reservation to hand out in order), also 0 and
    more than the pool (a window with no reservation); -1 only with ``misuse``."""
    any_size = st.integers(min_value=-1 if misuse else 0, max_value=max_reqs)
    return st.one_of(st.integers(min_value=1, max_value=3), any_size)


def raw_slots(*, max_slot: int = 13) -> SearchStrategy[list[int]]:
    """Arbitrary slot numbers for misuse: -1, padding 0, live, free, reserved and past the end."""
    return st.lists(st.integers(min_value=-1, max_value=max_slot), min_size=1, max_size=3)


# ---------------------------------------------------------------- plain-random twins
def sample_mamba_slot_config(rng: random.Random, *, max_size: int = 10) -> Config:
    """Twin of :func:`mamba_slot_configs`."""
    if rng.random() < 0.1:
        return {"size": MANY_SLOTS}
    return {"size": rng.randint(2, 6) if rng.random() < 0.5 else sample_pool_size(rng, max_size=max_size)}


def sample_hybrid_config(rng: random.Random, *, max_size: int = 8) -> Config:
    """Twin of :func:`hybrid_configs`."""
    size = sample_pool_size(rng, max_size=max_size)
    return {"size": size, "max_context_len": rng.choice((4, 8)),
            "mamba_size": max(0, size + rng.choice((-1, 1, 0, -2, 2, -3, 3)))}


def _slot_count(driver: Any, rng: random.Random) -> int:
    """``alloc`` sizes: mostly 1, often 0..4, and exactly what is free (or one more)."""
    model = driver.slot_model
    roll = rng.random()
    if roll < 0.5:
        return 1
    if roll < 0.8:
        return rng.randint(-1 if driver.check_misuse else 0, 4)
    return max(0, len(model.free) + rng.choice((0, 1)))


def _group_begin(driver: Any, rng: random.Random) -> Step | None:
    if driver.slot_model.group_open:
        return None
    free = len(driver.slot_model.free)
    return "group_begin", {"num_reqs": rng.choice((1, 2, 3, rng.randint(0, 6), free, free + 1))}


def _group_end(driver: Any, rng: random.Random) -> Step | None:
    return ("group_end", {}) if driver.slot_model.group_open else None


def _group_misuse(driver: Any, rng: random.Random) -> Step:
    return ("group_begin", {"num_reqs": rng.randint(0, 2)}) if driver.slot_model.group_open else ("group_end", {})


def _live_slot_handles(driver: Any) -> list[int]:
    live = driver.model.live
    return sorted(h for h, slot in driver.handles.items() if live.get(slot, -1) == h)


def _slot_alloc(driver: Any, rng: random.Random) -> Step:
    return "alloc", {"need_size": _slot_count(driver, rng)}


def _slot_alloc_in_window(driver: Any, rng: random.Random) -> Step | None:
    """``alloc`` of 1, 2, all or one more than the reservation left in the open window."""
    left = len(driver.slot_model.unconsumed)
    return ("alloc", {"need_size": rng.choice((1, 2, 2, left, left + 1))}) if left else None


def _open_a_reservation(driver: Any, rng: random.Random) -> Step:
    """Open a window reserving two or more slots (closing a spent one first)."""
    model = driver.slot_model
    if model.group_open:
        return "group_end", {}
    return "group_begin", {"num_reqs": rng.choice((2, 3, max(2, len(model.free) // 2)))}


def _slot_free(driver: Any, rng: random.Random) -> Step | None:
    live = _live_slot_handles(driver)
    return ("free", {"handles": rng.sample(live, rng.randint(1, min(3, len(live))))}) if live else None


def _slot_free_repeat(driver: Any, rng: random.Random) -> Step | None:
    """Live slots freed with one named twice, next to itself or with others between."""
    live = _live_slot_handles(driver)
    return ("free", {"handles": with_repeat(rng.sample(live, min(len(live), rng.randint(2, 3))), rng)}) if live else None


def _take_two_slots(driver: Any, rng: random.Random) -> Step:
    return "alloc", {"need_size": 2}


def _slot_free_again(driver: Any, rng: random.Random) -> Step | None:
    gone = [h for h in driver.handles if h not in _live_slot_handles(driver)]
    return ("free", {"handles": [rng.choice(gone)]}) if gone else None


def _slot_free_raw(driver: Any, rng: random.Random) -> Step:
    model = driver.model
    if model.unconsumed and rng.random() < 0.5:
        return "free_slots", {"slots": [rng.choice(model.unconsumed)]}
    return "free_slots", {"slots": [rng.randint(-1, model.size + 2) for _ in range(rng.randint(1, 3))]}


def _slot_clear(driver: Any, rng: random.Random) -> Step | None:
    model = driver.slot_model
    return ("clear", {}) if model.group_open or len(model.free) < model.size else None


def mamba_slot_walk() -> MoveTable:
    """``mamba_slots``: windows opened with reservations around what is free, repeats inside one free."""
    return MoveTable(sample_mamba_slot_config, (
        Move("alloc", 4, _slot_alloc),
        Move("alloc in a window", 2, _slot_alloc_in_window, "corner: alloc while a reservation is open",
             setup=_open_a_reservation),
        Move("group begin", 1.5, _group_begin),
        Move("group end", 1.5, _group_end),
        Move("group misuse", 0.3, _group_misuse, misuse=True),
        Move("free", 3, _slot_free),
        Move("free repeating", 1, _slot_free_repeat, CORNER_REPEAT, misuse=True, setup=_take_two_slots),
        Move("free again", 0.5, _slot_free_again, misuse=True),
        Move("free raw slots", 0.5, _slot_free_raw, misuse=True),
        Move("clear", 0.3, _slot_clear),
        *mamba_slot_catalogue(),
    ))


def _hybrid_handles(driver: Any, test: Callable[[int], bool]) -> list[int]:
    return sorted(h for h in driver.hybrid.claims if test(h))


def _hybrid_alloc(driver: Any, rng: random.Random) -> Step:
    """New requests and known ones; sized around the shorter side's room now and then."""
    hm = driver.hybrid
    known = sorted(driver.reqs)
    reuse = rng.sample(known, min(len(known), rng.randint(0, 2)))
    room = min(len(hm.free), hm.slots.capacity)
    new = rng.choice((rng.randint(0, 3), room, room + 1, max(len(hm.free), hm.slots.capacity)))
    batch: list[int | None] = [*([None] * min(new, 8)), *reuse]
    rng.shuffle(batch)
    return "alloc", {"batch": batch}


def _hybrid_readmit_mixed(driver: Any, rng: random.Random) -> Step | None:
    """A request holding its row but not its slot readmitted beside new ones, shuffled."""
    hm = driver.hybrid
    row_only = _hybrid_handles(driver, lambda h: hm.holds_row(h) and hm.claims[h].slot is None)
    if not row_only:
        return None
    batch: list[int | None] = [rng.choice(row_only), *([None] * rng.randint(1, 2))]
    rng.shuffle(batch)
    return "alloc", {"batch": batch}


def _donate_a_slot(driver: Any, rng: random.Random) -> Step:
    """Free the slot of a request holding both (its cache donated), or admit one."""
    hm = driver.hybrid
    both = _hybrid_handles(driver, lambda h: hm.holds_row(h) and hm.holds_slot(h))
    return ("free_mamba_cache", {"handle": rng.choice(both)}) if both else ("alloc", {"batch": [None]})


def _hybrid_admit(driver: Any, rng: random.Random) -> Step | None:
    if driver.slot_model.group_open:
        return None
    return "group_begin", {"num_reqs": rng.randint(0, 4)}


def _hybrid_free(driver: Any, rng: random.Random) -> Step | None:
    rows = _hybrid_handles(driver, driver.hybrid.holds_row)
    return ("free", {"handle": rng.choice(rows)}) if rows else None


def _hybrid_free_cache(driver: Any, rng: random.Random) -> Step | None:
    slots = _hybrid_handles(driver, driver.hybrid.holds_slot)
    return ("free_mamba_cache", {"handle": rng.choice(slots)}) if slots else None


def _hybrid_free_again(driver: Any, rng: random.Random) -> Step | None:
    known = sorted(driver.reqs)
    return (rng.choice(("free", "free_mamba_cache")), {"handle": rng.choice(known)}) if known else None


def _hybrid_write(driver: Any, rng: random.Random) -> Step | None:
    rows = _hybrid_handles(driver, driver.hybrid.holds_row)
    return ("write", {"handle": rng.choice(rows), "start": rng.randint(0, 8), "length": rng.randint(0, 4)}) if rows else None


def _hybrid_clear(driver: Any, rng: random.Random) -> Step | None:
    hm = driver.hybrid
    return ("clear", {}) if hm.slots.group_open or len(hm.free) < hm.num_rows else None


def hybrid_walk() -> MoveTable:
    """``hybrid_req_to_token``: batches sized to the shorter side, row-only requests readmitted beside new ones."""
    return MoveTable(sample_hybrid_config, (
        Move("alloc", 4, _hybrid_alloc),
        Move("readmit without a slot", 1.5, _hybrid_readmit_mixed, CORNER_MIXED, setup=_donate_a_slot),
        Move("group begin", 1, _hybrid_admit),
        Move("group end", 1, _group_end),
        Move("group misuse", 0.2, _group_misuse, misuse=True),
        Move("free row", 2, _hybrid_free),
        Move("free cache", 2, _hybrid_free_cache),
        Move("free again", 0.5, _hybrid_free_again, misuse=True),
        Move("write", 1, _hybrid_write),
        Move("clear", 0.3, _hybrid_clear),
        *hybrid_catalogue(),
    ))
