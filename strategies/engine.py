"""The ``engine`` family's move table: server shapes, arrivals, EOS at results, aborts, iterations.

The fuzzer chooses what users and the model choose, never a memory call: the scheduler
(upstream's, in :class:`harness.upstream.engine.EngineLoop`) decides what memory does with it.
Server shapes are small on purpose (a few rows, a few dozen KV slots), so admission refusals,
chunked prefill, eviction and decode retraction happen within a handful of iterations; prompts
come from stems that share prefixes so the tree splits and hits.
"""

from __future__ import annotations

from typing import Any

from harness.upstream.engine import CACHES
from strategies.choosers import Chooser
from strategies.table import Config, Move, MoveTable, Step

POOL_CHOICES = ("upstream", "both")
"""Upstream's pools alone, or in step with poolfuzz's (``implementations-agree``)."""


class EngineView:
    """What the engine moves may read: how many requests wait and run, and the server shape."""

    __slots__ = ("_driver",)

    def __init__(self, driver: Any) -> None:
        self._driver = driver

    @property
    def waiting(self) -> int:
        return len(self._driver.loop.waiting_queue)

    @property
    def running(self) -> int:
        return self._driver.loop.running_batch.batch_size()

    @property
    def rows(self) -> int:
        return int(self._driver.loop.config.rows)

    def occupancy(self) -> float:
        loop = self._driver.loop
        return 1.0 - loop.allocator.available_size() / max(1, loop.config.tokens)


def engine_config(choose: Chooser) -> Config:
    """A server shape: cache kind, page size, rows, KV slots, context, chunked prefill, and a model kind.

    A third of the shapes are a hybrid sliding-window model (what 0.5.23 builds for one: the SWA
    allocator under ``UnifiedRadixCache`` with FULL and SWA components), with a small window and
    an SWA pool about half the full one, and an eviction interval small enough that out-of-window
    frees happen within a request (the default 128 would never fire at these lengths).
    """
    page_size = choose.choice((1, 1, 4))
    rows = choose.randint(2, 6)
    pages = choose.randint(6, 24)
    tokens = pages * page_size * (2 if page_size == 1 else 1)
    swa = choose.randrange(0, 3) == 0
    cache = choose.choice(CACHES[1:] if swa else CACHES)
    # The scheduler's new-token ratio starts at 0.7 and decays toward its floor between retractions
    # (new_token_ratio_tracker); a low ratio admits more, so decode runs out and retracts.
    config: Config = {"cache": cache, "page_size": page_size, "rows": rows, "tokens": tokens, "context": 64,
                      "chunk": choose.choice((None, None, 8, 16)), "new_token_ratio": choose.choice((0.7, 0.1, 0.1)),
                      "pools": "upstream" if swa else choose.choice(POOL_CHOICES),
                      "sliding_window": None, "swa_tokens": 0, "swa_eviction_interval": 128}
    if swa:
        swa_pages = max(2, pages // 2 + choose.randint(-2, 2))
        config.update(sliding_window=choose.choice((2, 4, 8)), swa_tokens=swa_pages * page_size,
                      swa_eviction_interval=choose.choice((1, 4, 128)))
    return config


def _arrive(view: EngineView, choose: Chooser) -> Step | None:
    if view.waiting >= 2 * view.rows:
        return None
    return "arrive", {"stem": choose.randrange(0, 3), "length": choose.randint(1, 20), "tail": choose.randint(0, 6),
                      "max_new": choose.randint(1, 12)}


def _iterate(view: EngineView, choose: Chooser) -> Step | None:
    live = view.running + view.waiting
    if live == 0:
        # An idle iteration runs on_idle's checks; with nothing live, only now and then.
        return ("iterate", {"eos": []}) if choose.randrange(0, 5) == 0 else None
    eos = sorted({choose.randrange(0, live) for _ in range(choose.choice((0, 0, 0, 1, 2)))})
    return "iterate", {"eos": eos}


def _crowd(view: EngineView, choose: Chooser) -> Step | None:
    if view.waiting >= view.rows:
        return None
    return "crowd", {"count": view.rows, "max_new": choose.randint(16, 40)}


def _run(view: EngineView, choose: Chooser) -> Step | None:
    if view.running + view.waiting == 0:
        return None
    return "run", {"iterations": choose.randint(4, 32)}


def _abort(view: EngineView, choose: Chooser) -> Step | None:
    if view.running + view.waiting == 0:
        return None
    return "abort", {"pick": choose.randrange(0, 8)}


def engine_table() -> MoveTable:
    """Iterations commonest (each one runs upstream's whole memory path), arrivals next, aborts rare."""
    return MoveTable(
        configs=engine_config,
        moves=(
            Move("iterate", 6, _iterate),
            Move("arrive", 4, _arrive),
            Move("crowd", 1, _crowd),
            Move("run", 1, _run, corner="decode under memory pressure"),
            Move("abort", 1, _abort),  # rare: a request aborted is a request that never reaches decode
        ),
        view=EngineView,
        occupancy=EngineView.occupancy,
        corners=lambda config: [f"cache {config['cache']}", f"page_size {config['page_size']}",
                                "chunked prefill" if config["chunk"] else "no chunking",
                                "hybrid SWA" if config.get("sliding_window") else "full attention",
                                f"pools {config.get('pools', 'upstream')}"],
    )
