"""Benchmarks for app.privacy: calibration and conversion speed.

    python benchmarks/bench_privacy.py            # table
    python benchmarks/bench_privacy.py --json     # machine-readable

Target (issue 2): one calibration (22+ bisection steps over 98 orders) < 50 ms;
conversions vectorised over the order grid.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np

from app.privacy import (
    calibrate_clip_softmax,
    calibrate_gaussian,
    clip_softmax_rdp,
    convert_rdp,
    epsilon_lower_bound,
    gdp_epsilon,
    parse_orders,
)


def timeit(fn: Callable[[], object], repeat: int) -> dict[str, float]:
    fn()  # warm-up
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return {
        "median_ms": statistics.median(times) * 1e3,
        "min_ms": min(times) * 1e3,
        "max_ms": max(times) * 1e3,
        "repeat": repeat,
    }


def naive_algorithm2(orders, rdp, delta) -> float:
    """ICLInf Algorithm 2 as a Python loop, for comparison with the vectorised form."""
    best = math.inf
    for a, r in zip(orders, rdp):
        e = r + math.log((a - 1) / a) - (math.log(delta) + math.log(a)) / (a - 1)
        best = min(best, e)
    return best


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--repeat", type=int, default=50)
    args = ap.parse_args()
    n = args.repeat

    g98 = parse_orders("2-99")
    gdef = parse_orders(None)
    rows: list[dict] = []

    def add(name: str, fn: Callable[[], object], note: str = "") -> None:
        r = timeit(fn, n)
        rows.append({"case": name, **r, "note": note})

    iters = calibrate_clip_softmax("temperature", 4.0, 1e-5, compositions=2000, clip=10.0, batch_size=50,
                                   orders=g98).iterations
    add("calibrate temperature, 98 orders (2-99)",
        lambda: calibrate_clip_softmax("temperature", 4.0, 1e-5, compositions=2000, clip=10.0, batch_size=50,
                                       orders=g98), f"{iters} bisection steps")
    iters = calibrate_clip_softmax("temperature", 4.0, 1e-5, compositions=2000, clip=10.0, batch_size=50).iterations
    add(f"calibrate temperature, {gdef.size} orders (default)",
        lambda: calibrate_clip_softmax("temperature", 4.0, 1e-5, compositions=2000, clip=10.0, batch_size=50),
        f"{iters} bisection steps")
    add("calibrate clip, 98 orders",
        lambda: calibrate_clip_softmax("clip", 4.0, 1e-5, compositions=2000, temperature=1.0, batch_size=50,
                                       orders=g98))
    add("calibrate batch-size, 98 orders",
        lambda: calibrate_clip_softmax("batch-size", 4.0, 1e-5, compositions=2000, temperature=1.0, clip=10.0,
                                       orders=g98))
    add("calibrate gaussian sigma, analytic", lambda: calibrate_gaussian(1.0, 1e-5, sensitivity=math.sqrt(2)))
    add("calibrate gaussian sigma, rdp (default grid)",
        lambda: calibrate_gaussian(1.0, 1e-5, sensitivity=math.sqrt(2), method="rdp"))
    rdp98 = clip_softmax_rdp(g98, 10.0, 50, 10.0, 2000)
    add("convert RDP -> eps, 98 orders (vectorised, both conversions)", lambda: convert_rdp(g98, rdp98, 1e-5))
    add("convert RDP -> eps, 98 orders (Python loop, BBGHS only)", lambda: naive_algorithm2(g98, rdp98, 1e-5))
    add("clip-softmax RDP curve, 98 orders", lambda: clip_softmax_rdp(g98, 10.0, 50, 10.0, 2000))
    add("GDP mu -> eps", lambda: gdp_epsilon(1.0, 1e-5))
    add("empirical bound from counts", lambda: epsilon_lower_bound(900, 100, 100, 900, 0.95, 1e-5))

    meta = {"python": platform.python_version(), "numpy": np.__version__, "machine": platform.machine(),
            "processor": platform.processor() or "unknown"}
    if args.json:
        print(json.dumps({"meta": meta, "results": rows}, indent=2))
        return
    print(f"python {meta['python']}, numpy {meta['numpy']}, {meta['machine']}; {n} repeats, median / min / max")
    width = max(len(r["case"]) for r in rows)
    for r in rows:
        print(f"{r['case']:<{width}}  {r['median_ms']:8.3f} ms  {r['min_ms']:8.3f} ms  {r['max_ms']:8.3f} ms  {r['note']}")


if __name__ == "__main__":
    main()
