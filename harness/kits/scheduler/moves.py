"""The scheduler family's move table: pool configurations and every scheduler step, drawn through a chooser.

One table serves the hypothesis machine, the walk and the bench workload
(:mod:`poolfuzz.strategies.table`).  The moves read the scheduler's state only through
:class:`SchedulerView` (live, prefilling and running requests, whether a prefix cache
is on, whether a reset is due); the catalogue issues the malformed configurations one
of the scheduler's pools must refuse to be built from.

Pools are tiny on purpose (a handful of rows, Mamba slots and KV pages) so a
30-step run reaches exact capacity, one-page-short batches and full reuse of
freed pages; prompt and chunk lengths straddle page boundaries at every page size.
Empty pools are the single-pool machines' business: here every pool has room
for at least one request, so runs get past admission.

Steps name live requests by *picks* among the eligible handles (the model's, read
through the view), so every step is valid and the trace stores concrete handles.
The kernel the allocator uses is part of the config: :func:`scheduler_table` pins
it (and hybrid or plain rows, a page size, or one KV mode: plain, ``prefix_cache``
or ``sliding_window``), which is how
:func:`poolfuzz.harness.kits.scheduler.machine.scheduler_machine` builds its variants.  With the
prefix cache on, admissions carry token ids drawn from shared stems, so later
requests hit what earlier ones cached.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial

from poolfuzz.harness.kits.scheduler.config import SchedulerConfig
from poolfuzz.harness.kits.scheduler.ops import SchedulerOps
from poolfuzz.strategies.choosers import Chooser
from poolfuzz.strategies.table import DriverView, Move, MoveTable, Overrides, Step, one_of, pool_corners, viewed_table

MAX_CONTEXT_LENS = (16, 24, 48)
MODES = ("plain", "prefix_cache", "sliding_window")
"""The KV side's option: paged KV alone, with a ``RadixCache``, or an SWA allocator (exclusive)."""
EVICTION_POLICIES = ("lru", "fifo", "mru", "filo")
KERNELS = ("loop", "vectorized")
"""The kernels an unpinned table draws (interpreted Triton only when pinned, it is slow; compiled Triton is
added by :func:`poolfuzz.harness.kits.scheduler.machine.scheduler_kernels` on a device)."""
PAGE_SIZES = (4, 1, 3, 2, 8, 5)
"""Page sizes 1..8 (1 is where upstream's decode page count was wrong), shrinking toward 4."""
TRITON_PAGE_SIZES = (4, 1, 2, 8)
"""The Triton kernel's: powers of two only."""
WINDOW_PAGE_SIZES = (2, 4, 3, 8, 5)
"""A sliding window's (the SWA allocator needs page size > 1: ``alloc_extend``/``alloc_decode``)."""
WINDOW_TRITON_PAGE_SIZES = (2, 4, 8)

CLEAR_EVERY = 10
"""Steps between resets: a reset any time would keep the pools nearly empty."""
MAX_BATCH = 4
"""Requests in one admission, and prompts in one batch of token ids."""
MAX_PROMPT = 48
MAX_PICKS = 4
"""Requests one prefill or decode step names (a finish names at most 3)."""
MAX_CHUNK = 24
MAX_KEEP = 48

STEMS = ((1, 2, 3, 4, 5, 6, 7, 8), (1, 2, 3, 4, 6, 6, 6, 6), (2, 2, 2, 2, 2, 2, 2, 2))
"""Shared prompt pieces: they agree on their first half, so prompts built from them share
whole pages at every page size up to 8 and diverge inside a page at the larger ones."""

SCHEDULER_MALFORMED: tuple[Overrides, ...] = (
    {"kv_pages": -1},
    {"size": -1},
    {"page_size": 0},
    {"kernel": "gpu"},
    {"prefix_cache": True, "sliding_window": None, "eviction_policy": "newest"},
)
"""Scheduler configurations one of whose pools must refuse to be built."""


class SchedulerView(DriverView):
    """What the scheduler moves may read: the live, prefilling and running handles, whether the prefix cache
    is on, whether a reset is due, and how full the KV sides are (through the driver's model and trace)."""

    __slots__ = ()

    def live(self) -> list[int]:
        """Every live request's handle, in order."""
        return list(self._driver.model.handles())

    def prefilling(self) -> list[int]:
        """Requests with prompt tokens (or, after a retract, held tokens) still to extend."""
        return list(self._driver.model.handles(prefilling=True))

    def running(self) -> list[int]:
        """Requests that may decode: prefilled, and shorter than the context."""
        return list(self._driver.model.handles(prefilling=False, max_length=self._driver.max_len))

    def can_admit(self) -> bool:
        """Whether a row (and, over hybrid rows, a Mamba slot) is free for one more request."""
        return bool(self._driver.model.can_admit(1))

    def cached(self) -> bool:
        """Whether a prefix cache sits over the KV allocator (admissions then carry token ids)."""
        return self._driver.model.cache is not None

    def clear_due(self) -> bool:
        """At least :data:`CLEAR_EVERY` steps ran, none of the last :data:`CLEAR_EVERY` of them a reset."""
        steps = self._driver.trace.steps
        return len(steps) >= CLEAR_EVERY and all(step["op"] != "clear" for step in steps[-CLEAR_EVERY:])

    def occupancy(self) -> float:
        """The fuller KV side's share of pages in use (the SWA side's too, with a window)."""
        model = self._driver.model
        full = 1.0 - len(model.free_pages) / max(1, model.num_pages)
        return max(full, 1.0 - len(model.free_swa) / model.num_swa_pages) if model.num_swa_pages else full


# ---------------------------------------------------------------- configurations
def scheduler_modes(*, hybrid: bool | None = None, page_size: int | None = None, mode: str | None = None) -> list[str]:
    """The :data:`MODES` the pins allow: the options leave hybrid rows out, the window page size 1."""
    modes = [m for m in MODES if (mode is None or m == mode) and (m == "plain" or not hybrid) and (m != "sliding_window" or page_size != 1)]
    if not modes:
        raise ValueError(f"no scheduler mode fits mode={mode}, hybrid={hybrid}, page_size={page_size}")
    return modes


def scheduler_config(
    choose: Chooser, *, kernels: Sequence[str] = KERNELS, hybrid: bool | None = None, page_size: int | None = None, mode: str | None = None
) -> SchedulerConfig:
    """A config for :func:`poolfuzz.harness.kits.scheduler.driver.build_scheduler_pools`; the engine sets ``device``.

    ``hybrid``, ``page_size`` and ``mode`` (one of :data:`MODES`) pin those keys (``None``
    draws them).  The options are exclusive and leave Mamba rows out: SGLang 0.5.23 pairs
    hybrid-SWA and hybrid-Mamba models with their own caches (``SWARadixCache``,
    ``MambaRadixCache``), not ``RadixCache``.  The SWA allocator needs page size > 1
    (``alloc_extend``/``alloc_decode``); its window is 1 to 12 tokens and its pool 3 to 12
    pages, so windows smaller and larger than a page both occur.
    """
    kernel = choose.choice(kernels)
    chosen = choose.choice(scheduler_modes(hybrid=hybrid, page_size=page_size, mode=mode))
    window = chosen == "sliding_window"
    if page_size is None:
        triton = kernel == "triton"
        sizes = (WINDOW_TRITON_PAGE_SIZES if triton else WINDOW_PAGE_SIZES) if window else (TRITON_PAGE_SIZES if triton else PAGE_SIZES)
        page_size = choose.choice(sizes)
    size = choose.randint(1, 6)
    kv_pages = choose.randint(1 if chosen == "plain" else 3, 16)
    max_context_len = choose.choice(MAX_CONTEXT_LENS)
    with_mamba = (choose.choice((False, True)) if hybrid is None else hybrid) if chosen == "plain" else False
    mamba_size = choose.randint(1, 6)
    need_sort = choose.choice((False, True))
    policy = choose.choice(EVICTION_POLICIES) if chosen == "prefix_cache" else "lru"
    config = SchedulerConfig(
        kernel=kernel,
        page_size=page_size,
        size=size,
        kv_pages=kv_pages,
        max_context_len=max_context_len,
        hybrid=with_mamba,
        mamba_size=mamba_size,
        need_sort=need_sort,
        prefix_cache=chosen == "prefix_cache",
        eviction_policy=policy,
        sliding_window=None,
        swa_pages=0,
    )
    if window:
        sliding_window = choose.randint(1, 4) if choose.random() < 0.5 else choose.randint(1, 12)
        config = config.replaced(sliding_window=sliding_window, swa_pages=choose.randint(3, 12))
    return config


# ---------------------------------------------------------------- argument draws
def _picks(handles: list[int], choose: Chooser, *, most: int = MAX_PICKS) -> list[int]:
    """Up to ``most`` picks among ``handles``, a repeated pick named once, in pick order."""
    return list(dict.fromkeys(choose.choice(handles) for _ in range(choose.randint(1, most))))


def _prompt_len(choose: Chooser) -> int:
    """Short prompts half the time, any length up to :data:`MAX_PROMPT` otherwise (the driver clips to the context)."""
    return choose.randint(0, 8) if choose.random() < 0.5 else choose.randint(0, MAX_PROMPT)


def _first_chunk(choose: Chooser) -> int:
    """A first chunk of up to 12 tokens, up to half the longest prompt, or the longest prompt (the whole prompt)."""
    kind = choose.randint(0, 2)
    if kind == 2:
        return MAX_PROMPT
    return choose.randint(0, 12 if kind == 0 else MAX_PROMPT // 2)


def _prompt_tokens(choose: Chooser) -> list[int]:
    """A prompt's token ids: 1-4 :data:`STEMS`, then a tail of up to 6 tokens from a 4-token alphabet, so cache
    hits happen."""
    stems = [token for _ in range(choose.randint(1, 4)) for token in choose.choice(STEMS)]
    return stems + [choose.randint(0, 3) for _ in range(choose.randint(0, 6))]


# ---------------------------------------------------------------- random moves
def _admit(view: SchedulerView, choose: Chooser) -> Step:
    """A batch of 1-4 new requests as ``[prompt_len, first_chunk]``, whole or chunked, with 0-2 Mamba slots
    reserved past the batch; with the prefix cache, their token ids (up to 4 prompts, reused in turn when the
    batch is longer) set the prompt lengths, so admissions match what earlier ones cached.

    The driver clips the chunk to the prompt, so any pair is valid.
    """
    count = choose.randint(1, MAX_BATCH)
    if not view.cached():  # no entropy spent on token ids without a cache
        requests = [[_prompt_len(choose), _first_chunk(choose)] for _ in range(count)]
        return SchedulerOps.admit, {"requests": requests, "reserve_extra": choose.randint(0, 2)}
    chunks = [_first_chunk(choose) for _ in range(count)]
    reserve_extra = choose.randint(0, 2)
    prompts = [_prompt_tokens(choose) for _ in range(choose.randint(1, MAX_BATCH))]
    tokens = [prompts[i % len(prompts)] for i in range(count)]
    return SchedulerOps.admit, {
        "requests": [[len(t), chunk] for t, chunk in zip(tokens, chunks)],
        "reserve_extra": reserve_extra,
        "tokens": tokens,
    }


def _decode_all(view: SchedulerView, choose: Chooser) -> Step | None:
    """The scheduler's usual step: the whole running batch decodes one token."""
    running = view.running()
    return (SchedulerOps.decode, {"handles": running}) if running else None


def _decode(view: SchedulerView, choose: Chooser) -> Step | None:
    """Some running requests decode one token (the others wait: a batch of mixed lengths)."""
    running = view.running()
    return (SchedulerOps.decode, {"handles": _picks(running, choose)}) if running else None


def _prefill_all(view: SchedulerView, choose: Chooser) -> Step | None:
    """The scheduler's usual step: every chunked request continues by one chunk (zero to a few pages)."""
    prefilling = view.prefilling()
    return (SchedulerOps.prefill, {"handles": prefilling, "chunk": choose.randint(0, MAX_CHUNK)}) if prefilling else None


def _prefill(view: SchedulerView, choose: Chooser) -> Step | None:
    """Some chunked requests continue by one chunk, on the rows they hold (a zero chunk is a zero-length extend)."""
    prefilling = view.prefilling()
    if not prefilling:
        return None
    return SchedulerOps.prefill, {"handles": _picks(prefilling, choose), "chunk": choose.randint(0, MAX_CHUNK)}


def _finish(view: SchedulerView, choose: Chooser) -> Step | None:
    """Up to 3 requests finish: their KV freed inside one free group, then Mamba slots, then rows."""
    live = view.live()
    return (SchedulerOps.finish, {"handles": _picks(live, choose, most=3)}) if live else None


def _retract(view: SchedulerView, choose: Chooser) -> Step | None:
    """A request shrinks to the page boundary at or below ``keep`` (the driver clips ``keep`` to its length)."""
    live = view.live()
    return (SchedulerOps.retract, {"handle": choose.choice(live), "keep": choose.randint(0, MAX_KEEP)}) if live else None


_abort = one_of(SchedulerOps.abort, SchedulerView.live)
"""A request aborts mid-flight: row first, then Mamba slot and KV, no free group."""


def _toward_live(view: SchedulerView, choose: Chooser) -> Step | None:
    """What a step over live requests waits for: an admission, when a row is free for it (none is refused)."""
    return _admit(view, choose) if view.can_admit() else None


def _toward_running(view: SchedulerView, choose: Chooser) -> Step | None:
    """What a decode waits for: the chunked requests continue (every one of them), else a new batch is admitted."""
    return _prefill_all(view, choose) or _toward_live(view, choose)


def _clear(view: SchedulerView, choose: Chooser) -> Step | None:
    """Reset every pool, at most once per :data:`CLEAR_EVERY` steps."""
    return (SchedulerOps.clear, {}) if view.clear_due() else None


def scheduler_moves() -> tuple[Move[SchedulerView], ...]:
    """The scheduler's steps, commonest first (hypothesis shrinks toward the first): an admission always applies.

    Decode and prefill come twice, over a pick of the batch and as the scheduler's
    usual step over all of it; retract and abort name any live request (a retract of
    an empty one is skipped by the driver).  A step the state offers no request for
    admits a batch first where a row is free (a decode continues the chunked ones, if
    any), so a walk episode whose half of the moves leaves admission out still serves
    requests.  The weights of the picked steps, admit, finish, retract, abort and clear
    keep about the shares the bench workload had (a quarter admissions, a third
    decodes, a sixth prefills).
    """
    return (
        Move("admit", 2.5, _admit),
        Move("decode", 3, _decode, setup=_toward_running),
        Move("decode all", 2, _decode_all, setup=_toward_running),
        Move("prefill", 1.5, _prefill, setup=_toward_live),
        Move("prefill all", 1, _prefill_all, setup=_toward_live),
        Move("finish", 1.2, _finish, setup=_toward_live),
        Move("retract", 0.8, _retract, setup=_toward_live),
        Move("abort", 0.6, _abort, setup=_toward_live),
        Move("clear", 0.2, _clear),
    )


def _construct(overrides: Overrides) -> Callable[[SchedulerView, Chooser], Step]:
    """A constructor from this pool's config with ``overrides`` (a fresh copy each time)."""
    return lambda view, choose: (SchedulerOps.construct, {"overrides": dict(overrides)})


def scheduler_catalogue() -> tuple[Move[SchedulerView], ...]:
    """The malformed configurations of :data:`SCHEDULER_MALFORMED`, one misuse move each."""
    return tuple(Move(f"malformed constructor {c}", 0.02, _construct(c), misuse=True) for c in SCHEDULER_MALFORMED)


def scheduler_table(
    *, kernels: Sequence[str] = KERNELS, hybrid: bool | None = None, page_size: int | None = None, mode: str | None = None
) -> MoveTable[SchedulerView]:
    """The scheduler family's table; ``kernels``, ``hybrid``, ``page_size`` and ``mode`` pin its configurations
    (:func:`scheduler_config`).  The bench workload takes every step but the whole-batch ones."""
    scheduler_modes(hybrid=hybrid, page_size=page_size, mode=mode)  # a pin that fits no mode fails here
    if not kernels:
        raise ValueError("a scheduler table needs at least one kernel")
    return viewed_table(
        SchedulerView,
        partial(scheduler_config, kernels=tuple(kernels), hybrid=hybrid, page_size=page_size, mode=mode),
        scheduler_moves(),
        scheduler_catalogue(),
        corners=scheduler_corners,
        bench_moves=("admit", "prefill", "decode", "finish", "retract", "abort", "clear"),
    )


def scheduler_corners(config: SchedulerConfig) -> list[str]:
    """The KV pool's corners (``kv_pages`` pages of ``page_size``): ``size`` counts request rows here, not tokens."""
    return pool_corners(size=config.kv_pages * config.page_size, page_size=config.page_size)
