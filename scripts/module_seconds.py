"""Seconds per test module from a pytest junit XML, for tests/module_order.py's table.

    OMP_NUM_THREADS=1 .venv/bin/pytest -q -n 2 --dist loadfile --junitxml=/tmp/junit.xml
    .venv/bin/python scripts/module_seconds.py /tmp/junit.xml > tests/module_seconds.json

A module's seconds are the sum of its test cases' times (set-up and tear-down included, as junit counts
them); the modules over --min seconds are kept, longest first.
"""

from __future__ import annotations

import argparse
import collections
import json
import xml.etree.ElementTree as ET


def module_seconds(path: str) -> dict[str, float]:
    seconds: collections.Counter[str] = collections.Counter()
    for case in ET.parse(path).getroot().iter("testcase"):
        # classname "tests.api.test_x" or "tests.api.test_x.TestClass": the module is the part that
        # names a test_*.py file
        parts = case.get("classname", "").split(".")
        i = max((k for k, p in enumerate(parts) if p.startswith("test_")), default=len(parts) - 1)
        seconds["/".join(parts[: i + 1]) + ".py"] += float(case.get("time") or 0.0)
    return dict(seconds)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("junit_xml")
    ap.add_argument("--min", type=float, default=20.0, help="keep modules of at least this many seconds")
    args = ap.parse_args()
    rows = sorted(((m, s) for m, s in module_seconds(args.junit_xml).items() if s >= args.min), key=lambda r: -r[1])
    print(json.dumps({m: round(s, 1) for m, s in rows}, indent=1))


if __name__ == "__main__":
    main()
