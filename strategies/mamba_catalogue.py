"""The Mamba families' catalogues: one walk move per kind of misuse and per corner (see :mod:`strategies.kv_misuse`).

``mamba_slots``: sizes that are not ints, frees of a list or a float tensor,
an empty free, malformed constructors.  ``hybrid_req_to_token``: the request-row
catalogue (:func:`strategies.configs.row_catalogue`), forged requests claiming
Mamba slots, beam rows taken and given back, and the Mamba state calls
(``clear_slots``, ``copy_from``) valid and malformed.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from harness.judge.drivers.hybrid import FORGED_SLOT_FORMS, SLOT_CLAIMS
from harness.judge.drivers.mamba_state import STATE_MISUSE
from strategies.table import Config, Move, Step, through
from strategies.rows import RowView, row_catalogue

Draw = Callable[[Any, random.Random], "Step | None"]


def _fixed(op: str, **args: Any) -> Draw:
    return lambda driver, rng: (op, dict(args))


def _int32_free(driver: Any, rng: random.Random) -> Step | None:
    live = sorted(driver.model.live)
    return ("free_slots", {"slots": live[:2], "int32": True}) if live else None


def _free_many(driver: Any, rng: random.Random) -> Step | None:
    """More than 64 live slots freed at once, one left live (so what the call ends is not every live slot)."""
    live = sorted(driver.model.live)
    return ("free_slots", {"slots": live[1:]}) if len(live) > 65 else None


def _free_many_repeating(driver: Any, rng: random.Random) -> Step | None:
    live = sorted(driver.model.live)
    return ("free_slots", {"slots": [*live, live[len(live) // 2]]}) if len(live) > 64 else None


def _take_many(driver: Any, rng: random.Random) -> Step | None:
    free = len(driver.model.free)
    return ("alloc", {"need_size": free}) if free > 64 else None


def mamba_slot_catalogue() -> tuple[Move, ...]:
    constructors: tuple[Config, ...] = ({"size": -1}, {"size": 1.5})
    return (
        Move("free of more than 64 slots at once", 0.05, _free_many, setup=_take_many),
        Move("free of more than 64 slots, one named twice", 0.03, _free_many_repeating, misuse=True,
             setup=_take_many),
        Move("free of an empty tensor", 0.1, _fixed("free_slots", slots=[])),
        Move("free of an int32 tensor", 0.1, _int32_free, setup=_fixed("alloc", need_size=1)),
        Move("alloc of a float", 0.05, _fixed("alloc", need_size=1.5), misuse=True),
        Move("alloc of a bool", 0.05, _fixed("alloc", need_size=True), misuse=True),
        Move("group begin of a float", 0.05, _fixed("group_begin", num_reqs=2.0), misuse=True),
        Move("free of a list", 0.05, _fixed("free_malformed", form="list"), misuse=True),
        Move("free of a float tensor", 0.05, _fixed("free_malformed", form="float tensor"), misuse=True),
        Move("free of a 2-D tensor", 0.05, _fixed("free_malformed", form="2-D tensor"), misuse=True),
        Move("free of a 0-d tensor", 0.05, _fixed("free_malformed", form="0-d tensor"), misuse=True),
        *(Move(f"malformed constructor {c}", 0.03, _fixed("construct", overrides=c), misuse=True) for c in constructors),
    )


def _slot_holders(driver: Any) -> list[int]:
    hm = driver.hybrid
    return sorted(h for h in hm.claims if hm.holds_slot(h))


def _admit_two(driver: Any, rng: random.Random) -> Step | None:
    """Admit two requests, if both sides have room for them (a refused admission builds nothing)."""
    hm = driver.hybrid
    return ("alloc", {"batch": [None, None]}) if len(hm.free) >= 2 and hm.slots.capacity >= 2 else None


def _with_holders(count: int, make: Callable[[list[int], random.Random], Step]) -> Draw:
    """A step over ``count`` distinct requests holding a Mamba slot, or ``None`` (then the setup admits two)."""
    def draw(driver: Any, rng: random.Random) -> Step | None:
        holders = _slot_holders(driver)
        return make(rng.sample(holders, count), rng) if len(holders) >= count else None
    return draw


def _state_misuse(kind: str) -> Draw:
    return _with_holders(1, lambda held, rng: ("state_misuse", {"handles": held, "kind": kind}))


def _claiming(claim: str) -> Draw:
    def draw(driver: Any, rng: random.Random) -> Step | None:
        hm = driver.hybrid
        both = sorted(h for h in hm.claims if hm.holds_slot(h) and hm.holds_row(h))
        return ("alloc_claiming", {"handle": rng.choice(both), "claim": claim}) if both else None
    return draw


def _beam_rows(driver: Any, rng: random.Random) -> Step | None:
    beam = sorted(row for row, owner in driver.hybrid.owner.items() if owner is None)
    return ("free_rows", {"rows": beam[:2]}) if beam else None


def _forged_free(form: str) -> Draw:
    return _with_holders(1, lambda held, rng: ("free_mamba_cache_forged", {"handle": held[0], "form": form}))


def hybrid_catalogue() -> tuple[Move, ...]:
    constructors: tuple[Config, ...] = ({"mamba_size": -1}, {"num_layers": 0}, {"conv_shape": [-1]},
                                        {"temporal_shape": [-1]}, {"conv_shape": [1.5]}, {"temporal_shape": [2, 0.5]})
    return (
        *through(RowView, row_catalogue()),
        Move("beam rows given back", 0.2, _beam_rows, setup=_fixed("alloc_rows", need_size=2)),
        Move("write Mamba state", 0.3, _with_holders(1, lambda h, rng: ("write_state", {"handle": h[0]})),
             setup=_admit_two),
        Move("fork Mamba state", 0.3, _with_holders(2, lambda h, rng: ("copy_state", {"sources": h[:1], "targets": h[1:]})),
             setup=_admit_two),
        Move("clear Mamba state", 0.2, _with_holders(1, lambda h, rng: ("clear_state", {"handles": h})), setup=_admit_two),
        Move("clear no Mamba state", 0.03, _fixed("clear_state", handles=[])),
        Move("copy no Mamba state", 0.03, _fixed("copy_state", sources=[], targets=[])),
        *(Move(f"Mamba state: {kind}", 0.03, _state_misuse(kind), misuse=True, setup=_admit_two) for kind in STATE_MISUSE),
        *(Move(f"alloc with a forged request claiming {claim}", 0.03, _claiming(claim), misuse=True, setup=_admit_two)
          for claim in SLOT_CLAIMS),
        *(Move(f"free_mamba_cache of a request holding {form}", 0.03, _forged_free(form), misuse=True,
               setup=_admit_two) for form in FORGED_SLOT_FORMS),
        *(Move(f"malformed hybrid constructor {c}", 0.03, _fixed("construct", overrides=c), misuse=True)
          for c in constructors),
    )
