"""Key/value caches with padding holes, and an LRU of shared-prefix caches.

A :class:`KVBatch` is a batch of ``n`` sequences whose cached keys/values sit
in one ``DynamicCache`` of physical length ``T``. Rows may contain *holes*:
padding positions whose ``mask`` entry is 0. Holes appear when a shared
prefix is followed by suffixes of different lengths (the suffixes are right
padded) and stay masked for every later token. Each row keeps its own logical
length, which is the position id of its next token, so rotary positions are
exactly those of the unpadded sequence; causality is physical (a token sees
the cache before it), and the mask hides the holes. This is what makes batched
numbers equal one-at-a-time numbers.

One invariant keeps NaNs out: every query row must see at least one real
token (a query row with every key masked gives NaN keys/values in SDPA, and a
NaN in a masked value still poisons ``0 * NaN``). Callers guarantee it by never
feeding an all-padding row into an empty cache.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from transformers import DynamicCache


def cache_layers(cache: DynamicCache) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """(keys, values) of every layer of a filled ``DynamicCache`` (full-attention layers only)."""
    out = []
    for layer in cache.layers:
        keys, values = getattr(layer, "keys", None), getattr(layer, "values", None)
        if not isinstance(keys, torch.Tensor) or not isinstance(values, torch.Tensor):
            raise RuntimeError(f"internal: cache layer {type(layer).__name__} holds no keys/values")
        out.append((keys, values))
    return out


@dataclass(frozen=True)
class PrefixKV:
    """Keys/values of one unpadded token sequence (batch 1), per layer."""

    tokens: tuple[int, ...]
    layers: tuple[tuple[torch.Tensor, torch.Tensor], ...]  # (1, kv_heads, P, head_dim) each

    def __len__(self) -> int:
        return len(self.tokens)

    def truncate(self, m: int) -> PrefixKV:
        # Causal attention: the keys/values at positions < m depend only on tokens < m.
        if m == len(self.tokens):
            return self
        return PrefixKV(self.tokens[:m], tuple((k[:, :, :m], v[:, :, :m]) for k, v in self.layers))

    def nbytes(self) -> int:
        return sum(k.numel() * k.element_size() + v.numel() * v.element_size() for k, v in self.layers)


class KVBatch:
    """A batched KV cache with per-row masks and logical lengths (see module doc)."""

    def __init__(self, cache: DynamicCache, mask: torch.Tensor, lengths: torch.Tensor):
        self.cache = cache
        self.mask = mask  # (n, T) int64, 1 = real token
        self.lengths = lengths  # (n,) int64, real tokens so far = next position id

    @property
    def n(self) -> int:
        return int(self.mask.shape[0])

    @property
    def physical_length(self) -> int:
        return int(self.mask.shape[1])

    @classmethod
    def empty(cls, n: int, device: torch.device) -> KVBatch:
        return cls(
            DynamicCache(),
            torch.zeros((n, 0), dtype=torch.long, device=device),
            torch.zeros((n,), dtype=torch.long, device=device),
        )

    @classmethod
    def from_prefix(cls, prefix: PrefixKV | None, n: int, device: torch.device) -> KVBatch:
        if prefix is None or len(prefix) == 0:
            return cls.empty(n, device)
        p = len(prefix)
        # expand() is a view; DynamicLayer.update's torch.cat materialises one copy per row.
        data = [(k.expand(n, -1, -1, -1), v.expand(n, -1, -1, -1)) for k, v in prefix.layers]
        return cls(
            DynamicCache(ddp_cache_data=data),
            torch.ones((n, p), dtype=torch.long, device=device),
            torch.full((n,), p, dtype=torch.long, device=device),
        )

    def select(self, index: Sequence[int]) -> KVBatch:
        """A new batch made of rows ``index`` (repeats allowed); the cache is copied."""
        idx = torch.as_tensor(list(index), dtype=torch.long, device=self.mask.device)
        if self.physical_length == 0:
            return KVBatch.empty(len(idx), self.mask.device)
        data = [(k.index_select(0, idx), v.index_select(0, idx)) for k, v in cache_layers(self.cache)]
        return KVBatch(DynamicCache(ddp_cache_data=data), self.mask.index_select(0, idx), self.lengths.index_select(0, idx))

    def to_prefix(self, tokens: Sequence[int]) -> PrefixKV:
        """The single unpadded row of a batch of one, as a :class:`PrefixKV`."""
        assert self.n == 1 and bool(self.mask.all()), "only an unpadded batch of one is a prefix"
        layers = tuple(cache_layers(self.cache))
        return PrefixKV(tuple(tokens), layers)


def common_prefix_length(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def batch_common_prefix(rows: Sequence[Sequence[int]]) -> list[int]:
    if not rows:
        return []
    first = rows[0]
    m = len(first)
    for r in rows[1:]:
        m = min(m, common_prefix_length(first, r))
        if m == 0:
            break
    return list(first[:m])


class PrefixCache:
    """LRU of :class:`PrefixKV`, bounded by the total number of cached tokens.

    ``best_match`` returns the entry sharing the longest token prefix with a
    query, which can be truncated to that length (keys/values of a prefix do
    not depend on what follows it). Entries live in a ``scope`` (the tenant,
    app/llm/tenancy.py): a lookup sees its own scope's entries only, so one
    tenant's prefixes never serve, time or perturb another tenant's calls.
    """

    def __init__(self, max_tokens: int):
        self.max_tokens = max(0, int(max_tokens))
        self._entries: OrderedDict[tuple[str | None, tuple[int, ...]], PrefixKV] = OrderedDict()
        self._tokens = 0
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def cached_tokens(self) -> int:
        return self._tokens

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._tokens = 0

    def best_match(self, tokens: Sequence[int], scope: str | None = None) -> tuple[PrefixKV | None, int]:
        best, best_len = None, 0
        with self._lock:
            for (sc, key), entry in self._entries.items():
                if sc != scope:
                    continue
                m = common_prefix_length(key, tokens)
                if m > best_len:
                    best, best_len = entry, m
            if best is not None:
                self._entries.move_to_end((scope, best.tokens))
        return best, best_len

    def put(self, entry: PrefixKV, scope: str | None = None) -> None:
        if len(entry) == 0 or len(entry) > self.max_tokens:
            return
        with self._lock:
            if (scope, entry.tokens) in self._entries:
                self._entries.move_to_end((scope, entry.tokens))
                return
            # An entry of this scope that is a prefix of the new one is now redundant.
            for key in [(sc, k) for sc, k in self._entries
                        if sc == scope and len(k) < len(entry) and entry.tokens[: len(k)] == k]:
                self._tokens -= len(self._entries.pop(key))
            self._entries[(scope, entry.tokens)] = entry
            self._tokens += len(entry)
            while self._tokens > self.max_tokens and self._entries:
                _, old = self._entries.popitem(last=False)
                self._tokens -= len(old)
