"""Generation audits (issue 5): ESA bootstrap speed and what the bundled model leaks.

    python benchmarks/bench_gen_audit.py                 # both parts
    python benchmarks/bench_gen_audit.py --part speed    # no model
    python benchmarks/bench_gen_audit.py --part model --trials 64 --only full_context:repeat,bootstrap

speed: 400,000 draws per hypothesis of the ESA bootstrap (d = 384, 20 candidates per call,
16 clean calls per hypothesis), every estimate and the convergence table, against the naive
sampler (full 384-dimensional noise per draw, nearest candidate by full distances) on 20,000
draws, extrapolated. Same process, same world; the ratio is what to read.

model: SmolLM2-135M + MiniLM, 1 torch thread, the bundled dialogue set (2 exemplars, a
false-fact canary that is its own output, paired insertion), direct campaigns per
(mechanism, query): TPR/FPR and the Clopper-Pearson epsilon lower bound (95%), black-box and,
for ESA, white-box; then an ESA bootstrap from 2 x n_llm real clean calls.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from app.audit.gen_bootstrap import esa_bootstrap  # noqa: E402
from app.audit.gen_targets import CleanDraw  # noqa: E402

TEMPLATE = {"instruction": "Summarize the dialogue in one sentence.", "input_prefix": "Dialogue:",
            "output_prefix": "Summary:"}


def _world(rng, d=384, calls=16, n_cand=20):
    def unit(x):
        return x / np.linalg.norm(x, axis=-1, keepdims=True)

    e1, e0 = unit(rng.standard_normal(d)), unit(rng.standard_normal(d))
    cw = [CleanDraw(unit(e0 * 3 + e1 + 0.1 * rng.standard_normal(d)), unit(rng.standard_normal((n_cand, d))), 0.3)
          for _ in range(calls)]
    co = [CleanDraw(unit(e0 + 0.1 * rng.standard_normal(d)), unit(rng.standard_normal((n_cand, d))), 0.3)
          for _ in range(calls)]
    return np.vstack([e1, e0]), cw, co


def _naive(draws, signals, n, rng):
    """Full-dimensional draws, one at a time in numpy: what the reduction replaces."""
    out = np.empty((n, 2))
    for k in range(n):
        dr = draws[int(rng.integers(len(draws)))]
        m = dr.clean_mean + rng.standard_normal(dr.clean_mean.size) * dr.sigma
        d = np.linalg.norm(signals - m, axis=1)
        j = int(np.argmin(np.linalg.norm(dr.candidates - m, axis=1)))
        dc = np.linalg.norm(signals - dr.candidates[j], axis=1)
        out[k] = (d[1] - d[0], float(dc[0] < dc[1]))
    return out


def speed() -> dict:
    rng = np.random.default_rng(0)
    sig, cw, co = _world(rng)
    t = time.perf_counter()
    b = esa_bootstrap(cw, co, sig, "signal", rng=rng, n_sample=400_000, delta=1e-5, epsilon_theory=4.0)
    fast = time.perf_counter() - t
    n_naive = 20_000
    t = time.perf_counter()
    _naive(cw, sig, n_naive, rng)
    _naive(co, sig, n_naive, rng)
    naive = (time.perf_counter() - t) * 400_000 / n_naive
    return {"bootstrap_400k_s": round(fast, 3), "naive_400k_s_extrapolated": round(naive, 1),
            "speedup": round(naive / fast, 1),
            "estimates": {k: {"epsilon_lower": round(v.epsilon_lower, 3), "tpr": round(v.tpr, 4),
                              "fpr": round(v.fpr, 4)} for k, v in b.estimates.items()}}


def model(trials: int, n_llm: int, only: set[str] | None = None) -> list[dict]:
    import torch

    torch.set_num_threads(1)
    from app.audit import CampaignConfig, make_canary, run_campaign
    from app.audit.gen_targets import GenerationMechanismTarget
    from app.llm import bundled_specs, load_model

    cache = Path(os.environ.get("DPICL_MODEL_CACHE_DIR", Path.home() / ".cache" / "dpicl" / "models"))
    specs = bundled_specs()
    lm = load_model(next(s for s in specs if s.kind == "lm"), cache_dir=cache, device="cpu", dtype="float32")
    emb = load_model(next(s for s in specs if s.kind == "embedder"), cache_dir=cache, device="cpu", dtype="float32")
    rows = [json.loads(x) for x in (ROOT / "app/icl/data/gen_dialogsum.jsonl").read_text().splitlines() if x.strip()]
    short = sorted((r for r in rows if r["split"] == "train"), key=lambda r: len(r["input"]))[:2]
    ex = [(r["input"], r["output"]) for r in short]
    c = make_canary("false_fact", np.random.default_rng(0), label="-")
    canary = type(c)(c.kind, c.text, c.text)
    esa = {"epsilon": 4.0, "delta": 1e-5, "partitions": 2, "shots_per_partition": 1, "candidates": 4}
    mozo = {"epsilon": 4.0, "delta": 1e-5, "experts": 2}  # issue 18: each exemplar a one-shot expert
    out = []
    runs = [("full_context", {}, "signal_text", "margin"), ("full_context", {}, "reference", "margin"),
            ("full_context", {}, "repeat", "margin"), ("zero_shot", {}, "signal_text", "margin"),
            ("esa", esa, "signal_text", "margin"), ("esa", esa, "signal_text_white_box", "reference_vector"),
            ("mozo", mozo, "signal_text", "margin"), ("mozo", mozo, "repeat", "margin")]
    for mech, params, query, stat in runs:
        if only and f"{mech}:{query}" not in only:
            continue
        target = GenerationMechanismTarget(lm, emb, mech, params, TEMPLATE, max_tokens=16)
        t = time.perf_counter()
        r = run_campaign(target, ex, canary, query, task_labels=[], template=TEMPLATE,
                         config=CampaignConfig(trials=trials, statistic=stat), rng=np.random.default_rng(1))
        row = {"mechanism": mech, "query": query, "mode": "direct", "trials": trials, "calls": target.calls,
               "seconds": round(time.perf_counter() - t, 1), "epsilon_claimed": r.epsilon_claimed}
        for tm, e in r.estimates.items():
            row[tm] = {"tpr": round(e.tpr, 3), "fpr": round(e.fpr, 3), "epsilon_lower": round(e.epsilon_lower, 3)}
        out.append(row)
        print(json.dumps(row), flush=True)
    if only and "bootstrap" not in only:
        return out
    target = GenerationMechanismTarget(lm, emb, "esa", esa, TEMPLATE, max_tokens=16)
    t = time.perf_counter()
    r = run_campaign(target, ex, canary, "signal_text", task_labels=[], template=TEMPLATE,
                     config=CampaignConfig(mode="bootstrap", n_llm=n_llm, n_sample=400_000,
                                           statistic="reference_vector"), rng=np.random.default_rng(2))
    row = {"mechanism": "esa", "query": "signal_text", "mode": "bootstrap", "n_llm": n_llm, "calls": target.calls,
           "naive_calls": r.naive_model_calls, "seconds": round(time.perf_counter() - t, 1),
           "epsilon_claimed": r.epsilon_claimed}
    for tm, e in r.estimates.items():
        row[tm] = {"tpr": round(e.tpr, 4), "fpr": round(e.fpr, 4), "epsilon_lower": round(e.epsilon_lower, 3),
                   "epsilon_gdp": None if e.epsilon_gdp is None else round(e.epsilon_gdp, 3)}
    out.append(row)
    print(json.dumps(row), flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--part", choices=("speed", "model", "both"), default="both")
    ap.add_argument("--trials", type=int, default=16)
    ap.add_argument("--n-llm", type=int, default=4)
    ap.add_argument("--only", default="", help="comma-separated mechanism:query runs and/or 'bootstrap'")
    a = ap.parse_args()
    if a.part in ("speed", "both"):
        print(json.dumps({"speed": speed()}), flush=True)
    if a.part in ("model", "both"):
        model(a.trials, a.n_llm, {x for x in a.only.split(",") if x} or None)


if __name__ == "__main__":
    main()
