"""Draws for the SWA families: the pools' configurations and the ``swa_kv`` walk.

Both sides are drawn in pages, independently: the SWA side is usually the smaller one in a
real deployment, but the all-or-nothing checks only show on the side that runs short
first, so either may be.  Page size 1 (``alloc`` only) comes a third of the time, as in
:mod:`strategies.kv`.

:func:`swa_kv_walk` is the family's plain-random walk (``strategies.configs.MoveTable``): the walk
engine runs it, the hypothesis machine takes its moves from drawn seeds, the bench walks it.
Its moves read the driver's model: extends and tails sized to page edges (a tail starts on a
page boundary; the impossible ones only as misuse), the window sliding a request's oldest
pages out, frees on either side, and the misuse probes.
"""

from __future__ import annotations

import random
from functools import partial
from typing import Any

from hypothesis import strategies as st
from hypothesis.strategies import SearchStrategy

from strategies.table import MoveTable, Config, Move, Step
from strategies.kv import page_counts, page_sizes, sample_page_count
from strategies.page_alloc import edge_extend_lengths

FREE_CALLS = ("free", "free_swa", "free_full")


def swa_kv_configs(*, max_pages: int = 8) -> SearchStrategy[Config]:
    """``SWATokenToKVPoolAllocator(size, size_swa, page_size, device, need_sort, kernel)`` without ``device``.

    The SWA side is mostly no larger than the full side, as deployed, and drawn on its own
    otherwise.  ``kernel`` is ``vectorized`` or ``loop`` only: kernel agreement is
    ``paged_kv``'s business.  No ``flatmap``: every field is one draw, so the shrinker moves
    one without redrawing the others.
    """

    def build(page_size: int, full_pages: int, swa_pages: int, capped: bool, need_sort: bool, kernel: str) -> Config:
        swa = min(swa_pages, max(1, full_pages - 1)) if capped else swa_pages  # the SWA side runs short first
        return {"size": full_pages * page_size, "size_swa": swa * page_size, "page_size": page_size,
                "need_sort": need_sort, "kernel": kernel}

    full_pages = st.one_of(st.integers(min_value=2, max_value=max_pages), page_counts(max_pages=max_pages))
    swa_pages = st.one_of(st.integers(min_value=1, max_value=max_pages), page_counts(max_pages=max_pages))
    return st.builds(build, page_sizes(), full_pages, swa_pages, st.booleans().map(lambda b: not b), st.booleans(),
                     st.sampled_from(["vectorized", "loop"]))


def pure_swa_kv_configs(*, max_size: int = 16) -> SearchStrategy[Config]:
    """``PureSWATokenToKVPoolAllocator(size_swa, page_size=1, device, need_sort)`` without ``device``."""
    return st.fixed_dictionaries({"size_swa": page_counts(max_pages=max_size), "need_sort": st.booleans()})


# ---------------------------------------------------------------- plain-random twins
CONFIG_REGIONS = ("page size 1", "small pages", "odd pages", "large pages", "tight SWA side", "roomy", "any")
"""Regions of the configuration space a walk episode keeps to (swarm testing over configurations)."""


def sample_swa_kv_config(rng: random.Random, *, max_pages: int = 8) -> Config:
    """Twin of :func:`swa_kv_configs`, one :data:`CONFIG_REGIONS` region per draw."""
    region = rng.choice(CONFIG_REGIONS)
    ps = {"page size 1": 1, "small pages": rng.choice((2, 4)), "odd pages": rng.choice((3, 5, 7)),
          "large pages": rng.choice((16, 64))}.get(region) or rng.choice((1, 2, 4, rng.randint(2, 64)))
    full = rng.randint(max_pages, 3 * max_pages) if region == "roomy" else sample_page_count(rng, max_pages=max_pages)
    if region == "tight SWA side":
        swa = rng.randint(min(1, full), max(1, full // 3))
    else:
        swa = rng.randint(0, full) if rng.random() < 0.5 else sample_page_count(rng, max_pages=max_pages)
    return {"size": full * ps, "size_swa": swa * ps, "page_size": ps, "need_sort": rng.random() < 0.5,
            "kernel": rng.choice(("vectorized", "loop"))}


def _handles(driver: Any, *, windowed: bool | None = None, continuable: bool | None = None) -> list[int]:
    """Live requests; ``windowed``: with (or without) pages that still have SWA peers; ``continuable``:
    whose last token still has its peer (or page size 1, where ``alloc`` knows no requests)."""
    model = driver.model
    found = []
    for h in model.handles():
        if windowed is not None and bool(model.windowed_pages(h)) != windowed:
            continue
        if continuable is not None and (driver.page_size == 1 or model.last_in_window(h)) != continuable:
            continue
        found.append(h)
    return found


def _new_length(driver: Any, rng: random.Random) -> int:
    return rng.choice(edge_extend_lengths(0, driver.page_size) + [rng.randint(0, 3)])


def _admit(driver: Any, rng: random.Random) -> Step:
    return "extend", {"batch": [[None, _new_length(driver, rng)] for _ in range(rng.randint(1, 3))]}


def _grow(driver: Any, rng: random.Random) -> Step | None:
    live = _handles(driver, continuable=True)
    if not live:
        return None
    slots = driver.model.slots
    batch: list[list[int | None]] = [[h, rng.choice(edge_extend_lengths(len(slots[h]), driver.page_size))]
                                     for h in rng.sample(live, rng.randint(1, min(3, len(live))))]
    batch += [[None, _new_length(driver, rng)] for _ in range(rng.randint(0, 1))]
    rng.shuffle(batch)
    return "extend", {"batch": batch}


def _decode(driver: Any, rng: random.Random) -> Step | None:
    live = _handles(driver, continuable=True)
    return ("decode", {"handles": rng.sample(live, rng.randint(1, min(4, len(live))))}) if live else None


def _tail(driver: Any, rng: random.Random, *, valid: bool = True) -> Step | None:
    ps, slots = driver.page_size, driver.model.slots
    if ps == 1 and valid:
        return None
    handle = rng.choice(sorted(slots)) if slots and rng.random() < 0.4 else None
    pre = len(slots[handle]) if handle is not None else 0
    extend_len = rng.choice(edge_extend_lengths(pre, ps))
    tails = list(range((pre + extend_len) % ps, extend_len + 1, ps))
    bad = [extend_len + 1, -1] + [t + 1 for t in tails[-1:] if ps > 1 and t < extend_len]
    if valid and not tails:
        return None
    headed = [t for t in tails if t < extend_len]  # a head outside the tail must map to 0 (SGLang #25805)
    tail = rng.choice(headed if headed and rng.random() < 0.7 else tails) if valid else rng.choice(bad)
    return "tail", {"handle": handle, "extend_len": extend_len, "swa_tail_len": tail}


def _slide(driver: Any, rng: random.Random) -> Step | None:
    """The window slides: a request keeps its last 0-2 pages with SWA peers."""
    windowed = _handles(driver, windowed=True)
    if not windowed:
        return None
    handle = rng.choice(windowed)
    behind = len(driver.model.windowed_pages(handle)) - rng.choice((0, 1, 1, 2))
    return "free_swa", {"handle": handle, "pages": max(1, behind), "sparse": rng.random() < 0.3}


def _free(driver: Any, rng: random.Random) -> Step | None:
    live = driver.model.handles()
    return ("free", {"handle": rng.choice(live), "sparse": rng.random() < 0.4}) if live else None


def _free_full(driver: Any, rng: random.Random) -> Step | None:
    gone = _handles(driver, windowed=False)
    return ("free_full", {"handle": rng.choice(gone)}) if gone else None


def _alloc(driver: Any, rng: random.Random) -> Step | None:
    if driver.page_size != 1:
        return None
    fits = min(len(driver.model.full.free), len(driver.model.swa.free))
    return "alloc", {"need_size": rng.choice((0, 1, 2, 3, fits, fits + 1))}


def _group(driver: Any, rng: random.Random) -> Step | None:
    if driver.model.group_open:
        return "group_end", {}
    return ("group_begin", {}) if driver.model.slots else None


def _clear(driver: Any, rng: random.Random) -> Step | None:
    return ("clear", {}) if driver.model.slots else None


def _stale_continue(driver: Any, rng: random.Random) -> Step | None:
    stale = [h for h in _handles(driver, continuable=False) if driver.model.slots[h]]
    return ("decode", {"handles": [rng.choice(stale)]}) if stale else None


def _free_again(driver: Any, rng: random.Random) -> Step | None:
    gone = sorted(h for h, slots in driver.model.released.items() if slots)
    return ("free_again", {"handle": rng.choice(gone), "call": rng.choice(FREE_CALLS)}) if gone else None


def _free_raw(driver: Any, rng: random.Random) -> Step | None:
    model = driver.model
    if not model.slots:
        return None
    ps = model.page_size
    indices = [rng.randint(-1, model.full_pages + 2) * ps + rng.randint(0, 63) % ps for _ in range(rng.randint(1, 3))]
    return "free_indices", {"indices": indices, "call": rng.choice(FREE_CALLS)}


def _free_swa_gone(driver: Any, rng: random.Random) -> Step | None:
    gone = [h for h in driver.model.handles() if driver.model.unwindowed_pages(h)]
    return ("free_swa_again", {"handle": rng.choice(gone)}) if gone else None


def _free_full_mapped(driver: Any, rng: random.Random) -> Step | None:
    windowed = _handles(driver, windowed=True)
    return ("free_full", {"handle": rng.choice(windowed)}) if windowed else None


def _wrong_regime(driver: Any, rng: random.Random) -> Step:
    if driver.page_size == 1:
        return "tail", {"handle": None, "extend_len": 1, "swa_tail_len": 1}
    return "alloc", {"need_size": rng.choice((driver.page_size, -1))}


def _group_misuse(driver: Any, rng: random.Random) -> Step:
    return ("group_begin", {}) if driver.model.group_open else ("group_end", {})


CORNER_SWA_SHORT_DECODE = "corner: a decode opening a page when only the SWA side is out of pages"
CORNER_RECYCLED_TAIL = "corner: an SWA tail whose head lands on recycled full pages"


def _swa_short_decode(driver: Any, rng: random.Random) -> Step | None:
    """Toward a decode that needs a page the SWA side lacks while the full side has one: the decode,
    else the request that takes the SWA side's last pages, else a decode step toward a page edge."""
    model, ps = driver.model, driver.page_size
    if ps == 1 or not model.swa.free and not model.full.free:
        return None
    edge = [h for h in _handles(driver, continuable=True) if model.slots[h] and len(model.slots[h]) % ps == 0]
    if not model.swa.free and model.full.free and edge:
        return "decode", {"handles": [rng.choice(edge)]}
    if model.swa.free and len(model.full.free) > len(model.swa.free):
        return "extend", {"batch": [[None, len(model.swa.free) * ps]]}
    live = _handles(driver, continuable=True)
    return ("decode", {"handles": [rng.choice(live)]}) if live else None


def _recycled_tail(driver: Any, rng: random.Random) -> Step | None:
    """Toward an SWA tail with a head on full pages a freed request mapped: the tail, else the group's
    end, the free, or the request to free."""
    model, ps = driver.model, driver.page_size
    if ps == 1:
        return None
    if model.group_open:
        return "group_end", {}
    recycled = {s // ps for slots in model.released.values() for s in slots} & model.full.free
    if recycled and model.swa.free:
        extend_len = rng.choice((1, 2)) * ps + rng.choice((0, 1))
        if driver.config.get("need_sort") or rng.random() < 0.3:
            extend_len = len(model.full.free) * ps  # staged pages are taken only when the free list runs short
        heads = list(range(extend_len % ps, min(extend_len, len(model.swa.free) * ps + 1), ps))
        return "tail", {"handle": None, "extend_len": extend_len, "swa_tail_len": rng.choice(heads[-2:])}
    live = [h for h in model.handles() if model.windowed_pages(h)]
    if live:
        return "free", {"handle": rng.choice(live), "sparse": False}
    return "extend", {"batch": [[None, rng.choice((1, 2)) * ps]]}


_SWA_MOVES = (
    Move("admit", 3, _admit),
    Move("grow", 2, _grow),
    Move("decode", 3, _decode),
    Move("swa tail", 1.5, _tail),
    Move("SWA short at a page edge", 0.5, _swa_short_decode, CORNER_SWA_SHORT_DECODE),
    Move("tail on recycled pages", 0.5, _recycled_tail, CORNER_RECYCLED_TAIL),
    Move("window slides", 2.5, _slide),
    Move("free", 2, _free),
    Move("free out of the window", 1, _free_full),
    Move("alloc", 1, _alloc),
    Move("free group", 1.5, _group),
    Move("clear", 0.2, _clear),
    Move("continue out of the window", 0.3, _stale_continue, misuse=True),
    Move("impossible swa tail", 0.3, partial(_tail, valid=False), misuse=True),
    Move("free again", 0.4, _free_again, misuse=True),
    Move("free raw indices", 0.4, _free_raw, misuse=True),
    Move("free_swa out of the window", 0.3, _free_swa_gone, misuse=True),
    Move("free_full in the window", 0.3, _free_full_mapped, misuse=True),
    Move("wrong page regime", 0.2, _wrong_regime, misuse=True),
    Move("group misuse", 0.2, _group_misuse, misuse=True),
)


def swa_kv_walk() -> MoveTable:
    """``swa_kv``: admissions and tails sized to page edges, decodes, the window sliding, frees on both sides."""
    return MoveTable(sample_swa_kv_config, (*_SWA_MOVES, *swa_catalogue()))


# ---------------------------------------------------------------- the catalogue
def _fixed(op: str, **args: Any) -> Any:
    return lambda driver, rng: (op, dict(args))


def _continuable(driver: Any) -> list[int]:
    return [h for h in _handles(driver, continuable=True) if driver.model.slots[h]]


def _malformed(op: str, defect: str) -> Any:
    """A batch of one or two requests still in the window (extend: maybe a new one too) with ``defect``."""
    def draw(driver: Any, rng: random.Random) -> Step | None:
        live = _continuable(driver)
        if driver.page_size == 1 or not live:
            return None
        handles: list[int | None] = list(rng.sample(live, min(len(live), rng.randint(1, 2))))
        if op == "extend_malformed" and rng.random() < 0.5:
            handles.insert(rng.randint(0, len(handles)), None)
        return op, {"handles": handles, "defect": defect}
    return draw


def _admit_mid_page(driver: Any, rng: random.Random) -> Step | None:
    ps, model = driver.page_size, driver.model
    return ("extend", {"batch": [[None, ps + 1]]}) if ps > 1 and not model.pages_short(2, 2) else None


def _nested_begin(driver: Any, rng: random.Random) -> Step | None:
    return ("group_begin", {}) if driver.model.group_open else None


def _toward_a_slid_window(driver: Any, rng: random.Random) -> Step | None:
    """Admit a request of two pages, then slide the window past its first."""
    if not driver.model.slots:
        return None if driver.model.pages_short(2, 2) else ("extend", {"batch": [[None, 2 * driver.page_size]]})
    return _slide(driver, rng)


def _tail_misuse(kind: str) -> Any:
    def draw(driver: Any, rng: random.Random) -> Step | None:
        ps = driver.page_size
        if ps == 1:
            return None
        tail = ps + 1 if kind == "longer than the extend" else 1
        return "tail", {"handle": None, "extend_len": ps if tail > ps else 2 * ps, "swa_tail_len": tail}
    return draw


def swa_catalogue() -> tuple[Move, ...]:
    """Every kind of misuse ``SWATokenToKVPoolAllocator`` must reject, one move each, and its empty-call corners."""
    from harness.judge.drivers.kv_batches import DECODE_DEFECTS, EXTEND_DEFECTS

    constructors: tuple[Config, ...] = ({"page_size": 0}, {"size": -4}, {"size_swa": 2.5}, {"kernel": "gpu"})
    return (
        Move("empty extend batch", 0.05, _fixed("extend", batch=[])),
        *(Move(f"{call} of no index", 0.03, _fixed("free_indices", indices=[], call=call)) for call in FREE_CALLS),
        *(Move(f"malformed extend ({d})", 0.03, _malformed("extend_malformed", d), misuse=True, setup=_admit_mid_page)
          for d in EXTEND_DEFECTS),
        *(Move(f"malformed decode ({d})", 0.03, _malformed("decode_malformed", d), misuse=True, setup=_admit_mid_page)
          for d in DECODE_DEFECTS),
        Move("a tail of two requests", 0.05, _fixed("tail_of_two"), misuse=True),
        *(Move(f"a tail {kind}", 0.03, _tail_misuse(kind), misuse=True)
          for kind in ("longer than the extend", "not starting on a page boundary")),
        Move("free_swa of pages out of the window", 0.05, _free_swa_gone, misuse=True, setup=_toward_a_slid_window),
        Move("alloc of a float", 0.03, _fixed("alloc_non_int", need_size=1.5), misuse=True),
        Move("a call of the other page regime", 0.05, _wrong_regime, misuse=True),
        Move("nested free group", 0.03, _nested_begin, misuse=True, setup=_fixed("group_begin")),
        Move("free group end without a begin", 0.03,
             lambda driver, rng: None if driver.model.group_open else ("group_end", {}), misuse=True,
             setup=_fixed("group_end")),
        *(Move(f"malformed constructor {c}", 0.02, _fixed("construct", overrides=c), misuse=True) for c in constructors),
    )
