"""What the read phase of a private answer may keep between answers: a dataset's exemplars.

A dataset's exemplars and labels are fixed once it is registered (PATCH changes settings only), so
loading its 400 exemplar rows for every answer is work done once too often. The cache holds them
per dataset, keyed by what identifies that immutable content: ``(dataset id, tenant, created_at,
exemplar_count)``. It never decides whether a dataset exists: every answer still reads the dataset
row (and its budget account) in its read transaction, so a set deleted by any replica is refused
(404) by every replica from the next answer on, and a set re-created under the same id (a job's
derived id) has a new ``created_at`` and so a new key. ``forget`` drops a deleted set's entry at
once on the replica that deleted it; elsewhere it ages out of the LRU. Mutable settings
(``answer_reuse``, the budget) are never cached.

Bounded: at most ``max_exemplars`` exemplars in all (least recently used sets go first); one set
larger than that is not cached at all.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

from app.icl.templates import ExemplarPairs

Exemplars = tuple[tuple[str, str], ...]

DEFAULT_MAX_EXEMPLARS = 200_000


class DatasetCache:
    def __init__(self, max_exemplars: int = DEFAULT_MAX_EXEMPLARS) -> None:
        self.max_exemplars = max(0, int(max_exemplars))
        self._entries: OrderedDict[tuple[Any, ...], Exemplars] = OrderedDict()
        self._size = 0
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    @staticmethod
    def key_of(ds: Any) -> tuple[Any, ...]:
        """What identifies a dataset's immutable content (see the module docstring)."""
        created = ds.created_at.isoformat() if hasattr(ds.created_at, "isoformat") else str(ds.created_at)
        return (str(ds.id), str(ds.tenant_id), created, int(ds.exemplar_count or 0))

    def exemplars(self, ds: Any, load: Callable[[], Sequence[tuple[str, str]]]) -> Exemplars:
        """The exemplars of dataset row ``ds`` (read in the caller's transaction), loading them with
        ``load`` (in that same transaction) when they are not cached."""
        key = self.key_of(ds)
        with self._lock:
            hit = self._entries.get(key)
            if hit is not None:
                self._entries.move_to_end(key)
                self.hits += 1
                return hit
            self.misses += 1
        # Checked once here: the mechanisms' pass over the whole set (normalize_exemplars) skips it.
        value: Exemplars = ExemplarPairs((str(i), str(o)) for i, o in load())
        if len(value) > self.max_exemplars:
            return value
        with self._lock:
            if key not in self._entries:
                self._entries[key] = value
                self._size += len(value)
            while self._size > self.max_exemplars and self._entries:
                _, old = self._entries.popitem(last=False)
                self._size -= len(old)
        return value

    def forget(self, dataset_id: str) -> None:
        """Drop every entry of ``dataset_id`` (it was deleted here)."""
        with self._lock:
            for key in [k for k in self._entries if k[0] == dataset_id]:
                self._size -= len(self._entries.pop(key))

    def __len__(self) -> int:
        return len(self._entries)


_CREATE_LOCK = threading.Lock()


def dataset_cache(rt: Any) -> DatasetCache:
    """The runtime's cache (one per Runtime: two runtimes in one process never share entries)."""
    cache = rt.extras.get("dataset_cache")
    if cache is None:
        with _CREATE_LOCK:
            cache = rt.extras.setdefault("dataset_cache", DatasetCache())
    return cache
