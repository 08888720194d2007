"""Line a GPU utilisation log up with bench_serving's runs: the mean `utilization.gpu` (the percent of
time in which a kernel was running, as nvidia-smi samples it) over each run's wall time.

scripts/gpu_bench.sh samples `nvidia-smi --query-gpu=timestamp,utilization.gpu --format=csv,noheader
-lms 100` while bench_serving runs, then calls
    python3 benchmarks/gpu_util.py util.csv serving.json
which adds `gpu_busy_pct` (None where no sample fell inside the run) to every run of serving.json and
prints one line per run. nvidia-smi averages over its own sampling window (1/6 s to 1 s on most
cards), so a run shorter than a second is read coarsely: a lead, not a measurement of kernel time
(that is benchmarks/gpu_check.py's profiler figure).
"""
from __future__ import annotations

import datetime as dt
import json
import sys


def read_util(path: str) -> list[tuple[float, float]]:
    out = []
    for line in open(path, encoding="utf-8", errors="replace"):
        parts = [p.strip() for p in line.split(",")]
        if len(parts) < 2:
            continue
        try:  # "2026/11/28 05:30:01.123, 37 %"; nvidia-smi prints local time, the machine's is UTC
            t = dt.datetime.strptime(parts[0], "%Y/%m/%d %H:%M:%S.%f").replace(tzinfo=dt.timezone.utc)
            out.append((t.timestamp(), float(parts[1].split()[0])))
        except ValueError:
            continue
    return out


def annotate(util: list[tuple[float, float]], result: dict) -> list[str]:
    lines = []
    runs = [(name, r) for server in result.values() if isinstance(server, dict)  # "server", "batched", ...
            for name, w in server.items() if isinstance(w, dict) and isinstance(w.get("rounds"), list)
            for r in w["rounds"] if "started" in r]
    for name, r in runs:
        inside = [u for t, u in util if r["started"] <= t <= r["ended"]]
        r["gpu_busy_pct"] = round(sum(inside) / len(inside), 1) if inside else None
        lines.append(f"{name} round {r['round']} clients={r['clients']}: {r['answers_per_s']} ans/s, "
                     f"GPU busy {r['gpu_busy_pct']}% ({len(inside)} samples over {r['wall_s']} s)")
    return lines


def main() -> int:
    util_path, serving_path = sys.argv[1:3]
    result = json.load(open(serving_path))
    for line in annotate(read_util(util_path), result):
        print(line)
    with open(serving_path, "w") as f:
        json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
