"""What the KV allocators' caller contracts read of the driver (``token_kv``, ``paged_kv``, ``pure_swa_kv``, and the
SWA kit's ``swa_kv``).

Judge layer: the contracts' predicates (:mod:`poolfuzz.harness.kits.kv.contracts`) read the driver only through a
:class:`PagedContractView`, typed, so a driver's internals can change without the tables following them.
"""

from __future__ import annotations

from typing import Generic, TypeVar

from poolfuzz.harness.judge.view import DriverView
from poolfuzz.harness.kits.kv.model import KVModel

M = TypeVar("M")
"""The driver's model class."""


class PagedContractView(DriverView, Generic[M]):
    """A paged allocator's driver as its contract's predicates see it: its model (of type ``M``), its page size,
    whether a free group is open."""

    __slots__ = ()

    @property
    def model(self) -> M:
        """The driver's model: who holds which slot and page."""
        return self._driver.model

    @property
    def page_size(self) -> int:
        return int(self._driver.page_size)

    @property
    def group_open(self) -> bool:
        """Whether a free group is open (:func:`poolfuzz.harness.upstream.callers.outside_a_group`)."""
        return bool(self._driver.model.group_open)


class KVContractView(PagedContractView[KVModel]):
    """A token or paged KV driver (:class:`~poolfuzz.harness.kits.kv.model.KVModel`), as its contract sees it."""

    __slots__ = ()
