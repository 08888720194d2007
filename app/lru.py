"""A small thread-safe LRU memo: the last ``size`` keys used, oldest dropped first (None: not held).

Shared by the memos of hot paths (the ledger's composition, the engines' JSON texts, a remote model's
token cache) so that each does not write its own ``OrderedDict`` + lock again."""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any


class LRU:
    def __init__(self, size: int) -> None:
        if size < 1:
            raise ValueError("an LRU holds at least one entry")
        self.size = size
        self._d: OrderedDict[Any, Any] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: Any) -> Any:
        """The value held for ``key`` (now the most recently used), or None."""
        with self._lock:
            if key in self._d:
                self._d.move_to_end(key)
                return self._d[key]
        return None

    def put(self, key: Any, value: Any) -> None:
        with self._lock:
            self._d[key] = value
            self._d.move_to_end(key)
            while len(self._d) > self.size:
                self._d.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._d.clear()

    def __len__(self) -> int:
        return len(self._d)

    def __contains__(self, key: Any) -> bool:
        return key in self._d
