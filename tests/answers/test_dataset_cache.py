"""The read phase's per-dataset exemplar cache (app/answers/dataset_cache.py): keyed by what makes a
set's content immutable, bounded, dropped on delete."""

from __future__ import annotations

from datetime import datetime, timezone
from types import SimpleNamespace

from app.answers.dataset_cache import DatasetCache


def _ds(id_: str = "ds_1", created: int = 0, n: int = 2, tenant: str = "t"):
    return SimpleNamespace(id=id_, tenant_id=tenant, exemplar_count=n,
                           created_at=datetime(2026, 11, 26, 12, 0, created, tzinfo=timezone.utc))


def test_loaded_once_then_served_from_the_cache():
    cache, loads = DatasetCache(), []

    def load():
        loads.append(1)
        return [("a", "x"), ("b", "y")]

    first = cache.exemplars(_ds(), load)
    again = cache.exemplars(_ds(), load)
    assert first == again == (("a", "x"), ("b", "y")) and len(loads) == 1
    assert (cache.hits, cache.misses) == (1, 1)


def test_a_set_recreated_under_the_same_id_is_not_served_stale():
    cache = DatasetCache()
    cache.exemplars(_ds(created=0), lambda: [("old", "x"), ("old", "y")])
    assert cache.exemplars(_ds(created=1), lambda: [("new", "x"), ("new", "y")])[0] == ("new", "x")
    assert cache.exemplars(_ds(tenant="other"), lambda: [("t2", "x"), ("t2", "y")])[0] == ("t2", "x")


def test_forget_drops_every_entry_of_a_set():
    cache = DatasetCache()
    cache.exemplars(_ds(created=0), lambda: [("a", "x"), ("b", "y")])
    cache.exemplars(_ds(created=1), lambda: [("a", "x"), ("b", "y")])
    cache.exemplars(_ds("ds_2"), lambda: [("a", "x"), ("b", "y")])
    cache.forget("ds_1")
    assert len(cache) == 1
    loads = []
    cache.exemplars(_ds(created=0), lambda: loads.append(1) or [("a", "x"), ("b", "y")])
    assert loads == [1]


def test_bounded_by_exemplars_least_recently_used_first():
    cache = DatasetCache(max_exemplars=4)
    for i in range(3):
        cache.exemplars(_ds(f"ds_{i}"), lambda: [("a", "x"), ("b", "y")])
    assert len(cache) == 2  # 6 exemplars do not fit in 4: the oldest set went
    big = cache.exemplars(_ds("big", n=5), lambda: [("a", "x")] * 5)
    assert len(big) == 5 and len(cache) == 2  # larger than the whole cache: served, not kept
