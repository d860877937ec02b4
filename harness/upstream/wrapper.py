"""What every upstream wrapper shares: the misuse switch, the wrapped object, its provenance.

A wrapper (one per upstream target, in its family's kit: ``harness/kits/<kit>/upstream.py``) builds the
real upstream object and forwards the family protocol (:mod:`poolfuzz.pools.protocols`) to it, translating only
signatures.  No call is validated or repaired there, so the harness judges upstream's behaviour, not ours:
upstream does not validate its input, so every wrapper sets ``poolfuzz_check_misuse = False``, and machines
issue valid calls only.  The calls several families forward unchanged (free groups and ``clear``; the
paged ``alloc_extend`` / ``alloc_decode``) are forwarded here once, by :class:`FreeGroupForwarding` and
:class:`ExtendDecodeForwarding`.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any, ClassVar, Generic, TypeVar, overload

import torch

from poolfuzz.harness.upstream.loading import Distribution, copy_of
from poolfuzz.harness.upstream.sglang_files import SUPPORTED_VERSION
from poolfuzz.pools.protocols import ExtendDecodeCalls

R = TypeVar("R")
T = TypeVar("T", bound=type)
V = TypeVar("V")


def empty_indices(device: str | torch.device) -> torch.Tensor:
    return torch.empty(0, dtype=torch.int64, device=device)


def forwarded(protocol: type, name: str) -> Callable[..., Any]:
    """A method that calls ``self.inner.<name>`` with its arguments unchanged.

    It carries ``protocol``'s declaration of ``name`` (docstring, ``__wrapped__``), so ``inspect.signature`` and
    ``help`` show the protocol's signature: a long signature forwarded as it is is stated once, in the protocol.
    """
    declared = getattr(protocol, name)

    def forward(self: Any, *args: Any, **kwargs: Any) -> Any:
        return getattr(self.inner, name)(*args, **kwargs)

    return functools.update_wrapper(forward, declared)


class inner_attribute(Generic[V]):  # lower case, as `property` and `functools.cached_property` are
    """A read-only attribute that reads the same-named attribute of ``self.inner``, converted by ``convert``.

    ``size = inner_attribute(int)`` states what ``@property def size(self) -> int: return int(self.inner.size)`` does,
    once: a wrapper's sizes and sub-allocators are upstream's own, read at each access (never cached, so a wrapper
    never shows a value upstream no longer holds).
    """

    def __init__(self, convert: Callable[[Any], V]) -> None:
        self.convert = convert
        self.name = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, wrapper: None, owner: type | None = None) -> inner_attribute[V]: ...
    @overload
    def __get__(self, wrapper: object, owner: type | None = None) -> V: ...
    def __get__(self, wrapper: object | None, owner: type | None = None) -> inner_attribute[V] | V:
        if wrapper is None:
            return self
        return self.convert(getattr(wrapper.inner, self.name))  # type: ignore[attr-defined]


def as_is(value: Any) -> Any:
    """:class:`inner_attribute`'s conversion for an upstream object handed out unchanged (a tensor, a sub-allocator)."""
    return value


class UpstreamWrapper:
    """What every wrapper shares: the misuse switch, the wrapped object, provenance."""

    poolfuzz_check_misuse: ClassVar[bool] = False
    upstream_class: ClassVar[str] = ""
    upstream_version: ClassVar[str] = SUPPORTED_VERSION
    inner: Any

    def __repr__(self) -> str:
        return f"<upstream sglang=={self.upstream_version} {self.upstream_class} size={self.inner.size}>"

    def available_size(self) -> int:
        return int(self.inner.available_size())

    def alloc(self, need_size: int) -> torch.Tensor | None:
        return self.inner.alloc(need_size)  # type: ignore[no-any-return]

    def free(self, indices: torch.Tensor) -> None:
        self.inner.free(indices)


class FreeGroupForwarding:
    """``free_group_begin``, ``free_group_end`` and ``clear`` forwarded to ``inner`` unchanged (the KV and SWA wrappers)."""

    inner: Any

    def free_group_begin(self) -> None:
        self.inner.free_group_begin()

    def free_group_end(self) -> None:
        self.inner.free_group_end()

    def clear(self) -> None:
        self.inner.clear()


class ExtendDecodeForwarding:
    """``alloc_extend`` and ``alloc_decode`` forwarded to ``inner`` unchanged (the paged KV and SWA wrappers).

    Upstream's token allocator has neither (its base raises ``NotImplementedError``), so ``TokenKV`` does not mix this in.
    """

    inner: Any

    alloc_extend = forwarded(ExtendDecodeCalls, "alloc_extend")
    alloc_decode = forwarded(ExtendDecodeCalls, "alloc_decode")


def runs_upstream(distribution: Distribution) -> Callable[[T], T]:
    """Class decorator: every public method of a wrapper (its bases' included) runs in the window.

    A wrapper's calls reach upstream methods, and some of those import at call time (``allocator/base.py``
    imports ``prefill_budget`` inside a method); outside a window such an import would find the real
    installed package and execute its ``__init__``, a second copy of every class.  The window costs a
    few list operations a call.
    """

    def windowed(function: Callable[..., R]) -> Callable[..., R]:
        if getattr(function, "__poolfuzz_windowed__", False):
            return function

        @functools.wraps(function)
        def call(self: object, *args: object, **kwargs: object) -> R:
            # The copy is looked up once an object (its source folder is fixed when it is built), so a window
            # costs a few list operations, which the hottest wrapper calls can afford.
            state = self.__dict__
            copy = state.get("_poolfuzz_copy")
            if copy is None:
                copy = state["_poolfuzz_copy"] = copy_of(distribution)
            copy.open()
            try:
                return function(self, *args, **kwargs)
            finally:
                copy.close()

        call.__poolfuzz_windowed__ = True  # type: ignore[attr-defined]
        return call

    def decorate(cls: T) -> T:
        for name in dir(cls):
            if name.startswith("_") and name != "__init__":
                continue
            value = inspect.getattr_static(cls, name)
            if inspect.isfunction(value):  # properties only read upstream's attributes: no window
                setattr(cls, name, windowed(value))
        return cls

    return decorate
