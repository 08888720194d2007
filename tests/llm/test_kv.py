"""The prefix LRU and helpers, on small fake tensors (no model)."""

from __future__ import annotations

import torch

from app.llm import ModelSpec
from app.llm.kv import PrefixCache, PrefixKV, batch_common_prefix, common_prefix_length


def fake(tokens) -> PrefixKV:
    n = len(tokens)
    k = torch.arange(n, dtype=torch.float32).view(1, 1, n, 1)
    return PrefixKV(tuple(tokens), ((k, k + 100),))


def test_common_prefix():
    assert common_prefix_length([1, 2, 3], [1, 2, 4, 5]) == 2
    assert batch_common_prefix([[1, 2, 3], [1, 2, 3, 4], [1, 2]]) == [1, 2]
    assert batch_common_prefix([[1], [2]]) == []
    assert batch_common_prefix([]) == []


def test_truncate_keeps_leading_positions():
    e = fake([5, 6, 7, 8]).truncate(2)
    assert e.tokens == (5, 6) and e.layers[0][0].flatten().tolist() == [0.0, 1.0]
    assert e.layers[0][1].flatten().tolist() == [100.0, 101.0]


def test_best_match_and_lru_budget():
    cache = PrefixCache(max_tokens=10)
    cache.put(fake([1, 2, 3, 4]))
    cache.put(fake([9, 9, 9]))
    entry, m = cache.best_match([1, 2, 3, 7, 7])
    assert entry.tokens == (1, 2, 3, 4) and m == 3
    assert cache.best_match([4, 4]) == (None, 0)
    # [1,2,3,4] was just used, so [9,9,9] is the least recently used and goes first
    cache.put(fake([5, 5, 5, 5]))
    assert cache.cached_tokens == 8 and len(cache) == 2
    assert cache.best_match([9, 9, 9])[1] == 0
    cache.put(fake(list(range(11))))  # larger than the whole budget: not stored
    assert len(cache) == 2


def test_a_longer_entry_replaces_its_prefix():
    cache = PrefixCache(max_tokens=100)
    cache.put(fake([1, 2, 3]))
    cache.put(fake([1, 2, 3, 4, 5]))
    assert len(cache) == 1 and cache.cached_tokens == 5
    cache.clear()
    assert len(cache) == 0 and cache.cached_tokens == 0


def test_model_spec_is_hashable_with_options():
    a = ModelSpec("m", "lm", "bundled:smollm2-135m-instruct", options={"prefix_reuse": False})
    b = ModelSpec("m", "lm", "bundled:smollm2-135m-instruct", options={"prefix_reuse": False})
    assert a == b and hash(a) == hash(b) and len({a, b}) == 1
