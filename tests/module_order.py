"""Longest test modules first, so that the two xdist workers of `make test` finish together.

`make test` runs `-n 2 --dist loadfile --no-loadscope-reorder`: xdist hands whole modules to the workers
in collection order. Its own order (`--loadscope-reorder`, the default: most tests first) put long
modules with few tests last, where one worker ran them alone while the other had nothing left. Here the
modules are ordered by their measured seconds (tests/module_seconds.json, written by
scripts/module_seconds.py from a junit XML of a full run), longest first: the greedy longest-first rule,
whose finish is within the shortest listed module of the best. A module not in the table is short and
keeps its collection order after the listed ones; the tests inside a module keep theirs.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

TABLE = Path(__file__).with_name("module_seconds.json")


def _seconds() -> dict[str, float]:
    try:
        return {str(k): float(v) for k, v in json.loads(TABLE.read_text()).items()}
    except (OSError, ValueError, AttributeError):  # no table, or a broken one: collection order
        return {}


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    seconds = _seconds()
    if not seconds:
        return
    # sorted() is stable: unlisted modules (0 s) keep their order, and so do the tests of each module.
    items[:] = sorted(items, key=lambda item: -seconds.get(item.nodeid.split("::", 1)[0], 0.0))
