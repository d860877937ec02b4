"""Malformed ``alloc_extend`` / ``alloc_decode`` batches, one defect at a time.

A paged KV allocator must reject a batch that breaks the contract of its batch
calls with :class:`~poolfuzz.pools.errors.BadBatchError`, before it takes a page: the
lengths are 1-D integer tensors of one length, the CPU copies too, ``last_loc``
is an integer tensor of that length, ``0 <= prefix_len <= seq_len``,
``extend_num_tokens`` is the sum of the extends, a decode's post-step length is
at least 1, and, where the pool checks the layout, ``last_loc`` is the slot of
the prefix's last token (``-1`` for none) on a page the pool handed out.

Each defect is a function of a well-formed batch (:class:`BatchArgs`, built
from the model's requests) that breaks exactly one of those rules for one
request and says whether it applied.  The drivers
(:mod:`poolfuzz.harness.kits.kv.paged`, :mod:`poolfuzz.harness.kits.swa.driver`) pick
the defect by name from a trace, so a replay sends the same malformed call.
The defect names are public: traces and event labels carry them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch


@dataclass
class BatchArgs:
    """One batch call's arguments as plain values, plus the pool facts a defect needs.

    ``free_pages`` are pages the pool does not hold for anyone (free, staged or
    pending); ``num_pages`` is the pool's page count, so page ``num_pages + 1`` is
    outside it.
    """

    pres: list[int]
    seqs: list[int]
    lasts: list[int]
    page_size: int
    num_pages: int
    free_pages: list[int] = field(default_factory=list)
    extend_num_tokens: int = 0
    shapes: dict[str, str] = field(default_factory=dict)
    """Tensor-level damage by argument name: ``float``, ``2-D``, ``longer``, ``int32``."""

    def __post_init__(self) -> None:
        self.extend_num_tokens = sum(self.seqs) - sum(self.pres)


Defect = Callable[[BatchArgs], bool]


def _first(args: BatchArgs, wanted: Callable[[int], bool]) -> int | None:
    return next((i for i in range(len(args.seqs)) if wanted(i)), None)


def _set_last(args: BatchArgs, wanted: Callable[[int], bool], value: Callable[[int], int]) -> bool:
    i = _first(args, wanted)
    if i is None:
        return False
    args.lasts[i] = value(i)
    return True


def _on_page(args: BatchArgs, i: int, page: int) -> int:
    """``last_loc[i]`` moved to ``page`` at the same offset: aligned, but on another page."""
    return page * args.page_size + args.lasts[i] % args.page_size


def _continues(args: BatchArgs, i: int, *, decode: bool) -> bool:
    """Whether request ``i`` writes next to ``last_loc`` (its page must then be live)."""
    ps = args.page_size
    if decode:
        return (args.seqs[i] - 1) % ps != 0
    return args.pres[i] % ps != 0 and args.seqs[i] > args.pres[i]


def _shape(name: str, damage: str) -> Defect:
    def apply(args: BatchArgs) -> bool:
        args.shapes[name] = damage
        return True

    return apply


def _last_for_no_prefix(args: BatchArgs) -> bool:
    return _set_last(args, lambda i: args.pres[i] == 0, lambda i: args.page_size)


def _no_last_for_prefix(args: BatchArgs) -> bool:
    return _set_last(args, lambda i: args.pres[i] > 0, lambda i: -1)


def _last_off_by_one(args: BatchArgs) -> bool:
    return args.page_size > 1 and _set_last(args, lambda i: args.pres[i] > 0, lambda i: args.lasts[i] + 1)


def _last_on_free_page(args: BatchArgs, *, decode: bool) -> bool:
    if not args.free_pages:
        return False
    return _set_last(args, lambda i: _continues(args, i, decode=decode), lambda i: _on_page(args, i, args.free_pages[0]))


def _last_past_pool(args: BatchArgs, *, decode: bool) -> bool:
    return _set_last(args, lambda i: _continues(args, i, decode=decode), lambda i: _on_page(args, i, args.num_pages + 1))


def _seq_below_prefix(args: BatchArgs) -> bool:
    i = _first(args, lambda i: args.pres[i] > 0)
    if i is None:
        return False
    args.seqs[i] = args.pres[i] - 1
    args.extend_num_tokens = sum(args.seqs) - sum(args.pres)
    return True


def _negative_prefix(args: BatchArgs) -> bool:
    i = _first(args, lambda i: args.pres[i] == 0)
    if i is None:
        return False
    args.pres[i] = -1
    args.extend_num_tokens = sum(args.seqs) - sum(args.pres)
    return True


def _token_count_off(args: BatchArgs) -> bool:
    args.extend_num_tokens += 1
    return True


def _decode_length_zero(args: BatchArgs) -> bool:
    if not args.seqs:
        return False
    args.seqs[0] = 0
    return True


EXTEND_DEFECTS: dict[str, Defect] = {
    "seq_lens longer than the batch": _shape("seq_lens", "longer"),
    "prefix_lens_cpu longer than the batch": _shape("prefix_lens_cpu", "longer"),
    "float prefix_lens": _shape("prefix_lens", "float"),
    "2-D seq_lens": _shape("seq_lens", "2-D"),
    "last_loc longer than the batch": _shape("last_loc", "longer"),
    "float last_loc": _shape("last_loc", "float"),
    "negative prefix": _negative_prefix,
    "seq_len below prefix_len": _seq_below_prefix,
    "extend_num_tokens off by one": _token_count_off,
    "last_loc for an empty prefix": _last_for_no_prefix,
    "no last_loc for a prefix": _no_last_for_prefix,
    "last_loc off by one": _last_off_by_one,
    "last_loc on a page not handed out": lambda args: _last_on_free_page(args, decode=False),
    "last_loc past the pool": lambda args: _last_past_pool(args, decode=False),
}
"""Extend defects; the ``last_loc`` ones past the shapes break the layout, checked only where the pool checks it."""

DECODE_DEFECTS: dict[str, Defect] = {
    "seq_lens longer than the batch": _shape("seq_lens", "longer"),
    "float seq_lens_cpu": _shape("seq_lens_cpu", "float"),
    "last_loc longer than the batch": _shape("last_loc", "longer"),
    "post-step length 0": _decode_length_zero,
    "last_loc off by one": _last_off_by_one,
    "last_loc on a page not handed out": lambda args: _last_on_free_page(args, decode=True),
    "last_loc past the pool": lambda args: _last_past_pool(args, decode=True),
}

LAYOUT_DEFECTS = frozenset(
    {
        "last_loc for an empty prefix",
        "no last_loc for a prefix",
        "last_loc off by one",
        "last_loc on a page not handed out",
        "last_loc past the pool",
    }
)
"""Defects only a pool that checks the layout (``check_layout``, on by default on CPU) can see."""


def tensor(values: list[int], device: str, damage: str = "") -> torch.Tensor:
    """``values`` as an int64 tensor on ``device``, with ``damage`` (see :attr:`BatchArgs.shapes`) done to it."""
    if damage == "longer":
        values = [*values, values[-1] if values else 1]
    out = torch.tensor(values, dtype=torch.float32 if damage == "float" else torch.int64, device=device)
    if damage == "2-D":
        out = out.reshape(1, -1)
    elif damage == "int32":
        out = out.to(torch.int32)
    return out


def extend_call_args(args: BatchArgs, device: str) -> dict[str, object]:
    """Keyword arguments of ``alloc_extend`` for ``args`` (its damage included)."""

    def named(name: str, values: list[int], where: str) -> torch.Tensor:
        return tensor(values, where, args.shapes.get(name, ""))

    return {
        "prefix_lens": named("prefix_lens", args.pres, device),
        "prefix_lens_cpu": named("prefix_lens_cpu", args.pres, "cpu"),
        "seq_lens": named("seq_lens", args.seqs, device),
        "seq_lens_cpu": named("seq_lens_cpu", args.seqs, "cpu"),
        "last_loc": named("last_loc", args.lasts, device),
        "extend_num_tokens": args.extend_num_tokens,
    }


def decode_call_args(args: BatchArgs, device: str) -> dict[str, object]:
    """Keyword arguments of ``alloc_decode`` for ``args`` (its damage included)."""
    return {
        "seq_lens": tensor(args.seqs, device, args.shapes.get("seq_lens", "")),
        "seq_lens_cpu": tensor(args.seqs, "cpu", args.shapes.get("seq_lens_cpu", "")),
        "last_loc": tensor(args.lasts, device, args.shapes.get("last_loc", "")),
    }


def apply_defect(defects: dict[str, Defect], name: str, args: BatchArgs, *, layout_checked: bool) -> bool:
    """Break ``args`` with the defect ``name``; ``False`` when it does not apply (or the pool cannot see it)."""
    defect = defects.get(name)
    if defect is None or (name in LAYOUT_DEFECTS and not layout_checked):
        return False
    return defect(args)
