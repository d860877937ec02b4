"""Shadow model of the prefix cache as the scheduler sees it: cached pages keyed by token prefix, and locks.

The scheduler does not need the radix tree's shape, only what it promises:

* ``pages[tokens[:k*ps]]`` is the KV page holding tokens ``(k-1)*ps .. k*ps`` of
  every sequence that starts with that prefix.  A match is the longest run of
  such keys (page-aligned; a page is shared by every request that starts with it);
* a live request locks the keys of its protected prefix; ``protected`` is the
  tokens under at least one lock, ``evictable`` the rest (SGLang 0.5.23
  ``RadixCache``: locking a node locks its ancestors, so a locked key's parents
  are locked too);
* eviction frees unlocked keys whose extensions are gone first; which ones is the
  cache's policy (the ``prefix_cache`` family checks the order), so the model
  accepts any victims that are cached, unlocked and leave the key set prefix-closed.

Keys are tuples of token ids; pools here are a few pages, so the model stays
plain dicts.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

Key = tuple[int, ...]


def greedy_next(tokens: Sequence[int]) -> int:
    """The token a request decodes after ``tokens``: a fixed function of the last token.

    Decoding is deterministic, as greedy sampling is, so two requests with the same
    prompt write the same output tokens and a finished request's output can be a
    later request's cache hit.
    """
    return (5 * tokens[-1] + 3) % 7 if tokens else 1


@dataclass
class PrefixCacheModel:
    page_size: int
    pages: dict[Key, int] = field(default_factory=dict)
    locks: dict[Key, int] = field(default_factory=dict)

    def clear(self) -> None:
        self.pages.clear()
        self.locks.clear()

    # ------------------------------------------------------------ queries
    def keys(self, tokens: Sequence[int], length: int) -> list[Key]:
        """The page keys of ``tokens[:length]`` (``length`` page-aligned)."""
        ps = self.page_size
        return [tuple(tokens[:end]) for end in range(ps, length + 1, ps)]

    def match(self, tokens: Sequence[int]) -> int:
        """The longest cached page-aligned prefix of ``tokens``."""
        ps, n = self.page_size, 0
        while n + ps <= len(tokens) and tuple(tokens[: n + ps]) in self.pages:
            n += ps
        return n

    def slots(self, tokens: Sequence[int], length: int) -> list[int]:
        """The cached KV slots of positions ``0 .. length`` (all cached)."""
        ps = self.page_size
        return [self.pages[key] * ps + offset for key in self.keys(tokens, length) for offset in range(ps)]

    def held_pages(self) -> set[int]:
        return set(self.pages.values())

    def locked_keys(self) -> set[Key]:
        return {key for key, count in self.locks.items() if count > 0}

    def total_tokens(self) -> int:
        return len(self.pages) * self.page_size

    def protected_tokens(self) -> int:
        return len(self.locked_keys()) * self.page_size

    def evictable_tokens(self) -> int:
        return self.total_tokens() - self.protected_tokens()

    # ------------------------------------------------------------ updates
    def lock(self, tokens: Sequence[int], length: int) -> None:
        for key in self.keys(tokens, length):
            assert key in self.pages, "model: locking a prefix that is not cached"
            self.locks[key] = self.locks.get(key, 0) + 1

    def unlock(self, tokens: Sequence[int], length: int) -> None:
        for key in self.keys(tokens, length):
            assert self.locks.get(key, 0) > 0, "model: unlocking a prefix nobody locked"
            self.locks[key] -= 1
            if not self.locks[key]:
                del self.locks[key]

    def insert(self, tokens: Sequence[int], start: int, end: int, own_pages: Sequence[int]) -> None:
        """Cache positions ``start .. end`` (page-aligned, not cached yet) on the request's ``own_pages``."""
        for key, page in zip(self.keys(tokens, end)[start // self.page_size :], own_pages, strict=True):
            assert key not in self.pages, "model: inserting a prefix that is cached"
            self.pages[key] = page

    def evict(self, victims: Iterable[int]) -> dict[str, list[int]]:
        """Drop the keys on pages ``victims`` (the pages one ``evict`` freed); returns what the contract forbids.

        ``not_cached``: a freed page the cache did not hold; ``locked``: a freed page
        under a lock; ``orphaned``: a page still cached whose parent key was evicted.
        Nothing is dropped when anything is returned.
        """
        freed = set(victims)
        by_page = {page: key for key, page in self.pages.items()}
        problems = {
            "not_cached": sorted(freed - set(by_page)),
            "locked": sorted(p for p in freed & set(by_page) if self.locks.get(by_page[p], 0) > 0),
        }
        gone = {by_page[p] for p in freed & set(by_page)}
        problems["orphaned"] = sorted(
            page for key, page in self.pages.items() if key not in gone and len(key) > self.page_size and key[: -self.page_size] in gone
        )
        problems = {k: v for k, v in problems.items() if v}
        if not problems:
            for key in gone:
                del self.pages[key]
        return problems
