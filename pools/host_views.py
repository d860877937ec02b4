"""NumPy views that share a tensor's CPU storage, kept shared when a pool is copied.

CPU pools read and write their free lists and state tables through ``tensor.numpy()``
views: touching a handful of ids through one costs well under a microsecond, through
torch indexing about ten.  ``copy.deepcopy`` copies a tensor and a NumPy view of it
separately, so a copied pool would write its free list through a view of the
*original's* buffer state and read its own: the copy silently diverges (a drain audit
of a deep-copied prefix cache reported pages freed that no eviction frees, until this
mixin).  A class naming its views in ``_host_views`` gets a ``__deepcopy__`` that
copies everything else and re-takes each view from the copied tensor (or ``bytearray``).
"""

from __future__ import annotations

import copy
import operator
from typing import Any, ClassVar

import numpy as np

__all__ = ["HostViews"]


class HostViews:
    """Mixin: each ``(view attribute, tensor attribute path)`` of ``_host_views`` is re-derived on deep copy."""

    _host_views: ClassVar[tuple[tuple[str, str], ...]] = ()

    def __deepcopy__(self, memo: dict[int, Any]) -> Any:
        cls = type(self)
        clone = cls.__new__(cls)
        memo[id(self)] = clone
        views = dict(self._host_views)
        for name, value in vars(self).items():
            if name not in views:
                vars(clone)[name] = copy.deepcopy(value, memo)
        for name, path in views.items():
            view = getattr(self, name, None)
            if view is None:
                if name in vars(self):
                    vars(clone)[name] = None
                continue
            source = operator.attrgetter(path)(clone)
            vars(clone)[name] = np.frombuffer(source, dtype=view.dtype) if isinstance(source, bytearray) else source.numpy()
        return clone
