#!/usr/bin/env python
"""Generation benchmarks (figures in docs/generation.md and the README).

    # clip_softmax decoding: time per token with the KV cache vs re-encoding every step
    python benchmarks/bench_generate.py kv --prompts 50 --tokens 40 --reencode-steps 4

    # ROUGE-L on the bundled dialogue-summary task, every mechanism at epsilon 1/4/8 + baselines
    python benchmarks/bench_generate.py rouge --items 20 --tokens 16

    # ICLInf-style decoding audit of mozo: data-dependent Renyi loss per token vs the charged curve
    python benchmarks/bench_generate.py mozo-audit --items 5 --tokens 16 --epsilons 2,8

    # chunked rouge runs (--start s --items k --out f.json) of one model joined: means, paired differences
    python benchmarks/bench_generate.py merge a.json b.json
    # ... and paired against another setting's runs on the items both have (vs_against per key)
    python benchmarks/bench_generate.py merge a.json b.json --against old_a.json old_b.json

``kv``: one process, the bundled SmolLM2-135M-Instruct, s one-shot prompts from the
bundled task. The KV-cached run decodes ``--tokens`` tokens (clip-softmax, temperature
calibrated for epsilon 8); the re-encoding run then replays the same tokens for
``--reencode-steps`` steps, each a fresh forward of every full sequence (no KV kept
across steps; the model's cross-call prefix cache is cleared), and its logits are
compared with the cached ones. Per-token time = model step + the private choice.

``rouge``: the private exemplar set is the task's 240 training pairs; the queries are
the first ``--items`` test dialogues. Model calls of ``generate`` are memoised inside
the run (same prompts, same seed -> same answer), so ESA's and KSA's member answers and
ESA's zero-shot candidates, which do not depend on epsilon, are computed once per item;
each item uses one noise generator seed for every epsilon (common random numbers).
``--public-top-k 0,20,100`` runs clip_softmax and poe once per k (0: whole vocabulary),
reported as ``clip_softmax[k=20]@8``; ``--no-baselines`` skips zero_shot/full_context.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from app.mechanisms import clip_softmax as cs  # noqa: E402
from app.mechanisms.gen_common import GenerationRequest, PromptTemplate, build_prompt  # noqa: E402
from app.mechanisms.gen_decode import ReencodeSession  # noqa: E402
from app.mechanisms.gen_rouge import rouge_l  # noqa: E402
from app.mechanisms.generation import generate  # noqa: E402

TASK = ROOT / "app" / "icl" / "data" / "gen_dialogsum.jsonl"
TEMPLATE = PromptTemplate("Summarize the dialogue in one sentence.", "Dialogue:", "Summary:")


def load_task() -> tuple[list[tuple[str, str]], list[dict]]:
    rows = [json.loads(line) for line in TASK.read_text(encoding="utf-8").splitlines() if line.strip()]
    train = [(r["input"], r["output"]) for r in rows if r["split"] == "train"]
    test = [r for r in rows if r["split"] == "test"]
    return train, test


def load_models(need_embedder: bool, model: str = ""):
    from app.llm import ModelSpec, bundled_specs, load_model

    cache = Path(os.environ.get("DPICL_MODEL_CACHE_DIR", Path.home() / ".cache" / "dpicl" / "models"))
    specs = bundled_specs()
    spec = ModelSpec(model, "lm", f"bundled:{model}") if model else next(s for s in specs if s.kind == "lm")
    lm = load_model(spec, cache_dir=cache, device=os.environ.get("DPICL_DEVICE", "auto"),
                    dtype="float32")
    emb = load_model(next(s for s in specs if s.kind == "embedder"), cache_dir=cache, device="cpu",
                     dtype="float32") if need_embedder else None
    return lm, emb


def env_line(lm) -> str:
    import torch

    try:
        load = os.getloadavg()[0]
    except OSError:
        load = float("nan")
    return (f"{platform.machine()} {os.cpu_count()} cpus (load {load:.1f}), torch {torch.__version__} "
            f"{torch.get_num_threads()} threads, model {lm.name} on {getattr(lm, 'device', '?')}")


# ---------------------------------------------------------------------------
# kv
# ---------------------------------------------------------------------------


def bench_kv(args) -> dict:
    lm, _ = load_models(False)
    train, test = load_task()
    query = test[0]["input"]
    prompts = [build_prompt(lm, TEMPLATE, [train[i]], query) for i in range(args.prompts)]
    lengths = [len(lm.tokenize(p)) for p in prompts]
    tau = cs.calibrate_temperature(args.epsilon, 1e-5, args.clip, args.prompts, args.tokens)
    rng = np.random.default_rng(0)

    t0 = time.perf_counter()
    sess = lm.start_decode(prompts)
    kv_prefill = time.perf_counter() - t0
    tokens: list[int] = []
    kv_times: list[float] = []
    kv_logits: list[np.ndarray] = []
    logits = sess.logits
    for i in range(args.tokens):
        t = time.perf_counter()
        tok = cs.sample_token(logits, args.clip, tau, rng)
        if i < args.reencode_steps + 1:
            kv_logits.append(logits.copy())
        if i < args.tokens - 1:
            logits = sess.step(tok)
        kv_times.append(time.perf_counter() - t)
        tokens.append(tok)
    sess.close()

    t0 = time.perf_counter()
    ref = ReencodeSession(lm, prompts)
    re_prefill = time.perf_counter() - t0
    re_times: list[float] = []
    max_diff = float(np.max(np.abs(ref.logits - kv_logits[0])))
    logits = ref.logits
    for i in range(args.reencode_steps):
        t = time.perf_counter()
        cs.sample_token(logits, args.clip, tau, rng)  # the same private-choice work as above
        logits = ref.step(tokens[i])
        re_times.append(time.perf_counter() - t)
        max_diff = max(max_diff, float(np.max(np.abs(logits - kv_logits[i + 1]))))
    ref.close()
    kv_steps = kv_times[:-1]  # the last token needs no forward pass
    out = {
        "env": env_line(lm),
        "prompts": args.prompts,
        "prompt_tokens_mean": float(np.mean(lengths)),
        "tokens": args.tokens,
        "temperature": tau,
        "kv_prefill_s": kv_prefill,
        "kv_ms_per_token": 1000 * float(np.mean(kv_steps)),
        "kv_ms_per_token_first_steps": 1000 * float(np.mean(kv_steps[: args.reencode_steps])),
        "reencode_steps": args.reencode_steps,
        "reencode_first_encode_s": re_prefill,
        "reencode_ms_per_token": 1000 * float(np.mean(re_times)),
        "speedup": float(np.mean(re_times) / np.mean(kv_steps)),
        "speedup_same_steps": float(np.mean(re_times) / np.mean(kv_steps[: args.reencode_steps])),
        "max_abs_logit_diff": max_diff,
        "text": lm.detokenize(tokens),
    }
    return out


# ---------------------------------------------------------------------------
# rouge
# ---------------------------------------------------------------------------


class MemoLM:
    """Memoises ``generate`` (deterministic given prompts, settings and seed) and prefills: a decode session
    over prompts seen before (the same partition at the next epsilon: the per-item seed is shared) is a
    fork of the stored prefilled session (``DecodeSession.fork``: its own cache copy, the same numbers as
    a fresh prefill up to the ~1e-6 of a reused prefix). Everything else passes through."""

    KEEP_SESSIONS = 4  # one item's private and public sessions, with room for a second mechanism

    def __init__(self, lm):
        self._lm = lm
        self._memo: dict = {}
        self._sessions: dict = {}
        self.hits = 0
        self.prefill_hits = 0

    def start_decode(self, prompts, *, reuse_prefix: bool = True):
        key = (tuple(p if isinstance(p, str) else tuple(p) for p in prompts), reuse_prefix)
        base = self._sessions.pop(key, None)
        if base is None:
            base = self._lm.start_decode(prompts, reuse_prefix=reuse_prefix)
        else:
            self.prefill_hits += 1
        self._sessions[key] = base  # most recent last
        while len(self._sessions) > self.KEEP_SESSIONS:
            self._sessions.pop(next(iter(self._sessions))).close()
        return base.fork()

    def __getattr__(self, name):
        return getattr(self._lm, name)

    def generate(self, prompts, **kw):
        key = (tuple(prompts), tuple(sorted((k, tuple(v) if isinstance(v, list) else v) for k, v in kw.items())))
        if key in self._memo:
            self.hits += 1
            return self._memo[key]
        out = self._lm.generate(prompts, **kw)
        self._memo[key] = out
        return out


MECH_PARAMS = {
    "esa": {"partitions": 8, "shots_per_partition": 4, "candidates": 10},
    "ksa": {"partitions": 20, "shots_per_partition": 4},
    "clip_softmax": {"prompts": 32, "shots_per_prompt": 1},
    "poe": {"experts": 32},
    "mozo": {"experts": 32},
}


def bench_rouge(args) -> dict:
    lm0, emb = load_models(any(m == "esa" for m in args.mechanisms.split(",")), args.model)
    lm = MemoLM(lm0)
    train, test = load_task()
    if args.train_size:
        train = train[: args.train_size]  # a smaller private set (the first N training pairs), e.g. for subsample
    items = test[args.start: args.start + args.items] if args.start >= 0 else test[args.start:][: args.items]
    first = args.start if args.start >= 0 else len(test) + args.start  # index in the test split of items[0]
    epsilons = [float(e) for e in args.epsilons.split(",")]
    mechs = [m for m in args.mechanisms.split(",") if m]
    params = dict(MECH_PARAMS)
    if args.params:
        params.update(json.loads(args.params))
    scores: dict[str, list[float]] = {}
    seconds: dict[str, float] = {}
    examples: dict[str, str] = {}
    ks = [int(k) for k in args.public_top_k.split(",")] if args.public_top_k else [None]
    runs: list[tuple[str, float | None, int | None]] = [] if args.no_baselines else [
        ("zero_shot", None, None), ("full_context", None, None)]
    for m in mechs:
        for k in (ks if m in ("clip_softmax", "poe") else [None]):
            runs += [(m, e, k) for e in epsilons]
    for j, item in enumerate(items):
        for mech, eps, k in runs:
            name = mech if k is None else f"{mech}[k={k}]"
            key = name if eps is None else f"{name}@{eps:g}"
            p = {"shots": args.full_context_shots} if mech == "full_context" else dict(params.get(mech, {}))
            if k is not None:
                p["public_top_k"] = k
            req = GenerationRequest.build(train, item["input"], epsilon=eps, delta=1e-5, max_tokens=args.tokens,
                                          template=TEMPLATE, params=p)
            t = time.perf_counter()
            # per-item seed 1000 + (index in the test split from --start >= 0): chunked runs (--start 2 --items 2)
            # reuse the seeds of one 10-item run
            seed = 1000 + j + (args.start if args.start >= 0 else 0)
            res = generate(mech, req, lm, emb, np.random.default_rng(seed))
            seconds[key] = seconds.get(key, 0.0) + time.perf_counter() - t
            scores.setdefault(key, []).append(rouge_l(res.text, item["output"]))
            if j == 0:
                examples[key] = res.text
            print(f"[{j + 1}/{len(items)}] {key:18s} {scores[key][-1]:.3f} {time.perf_counter() - t:6.1f}s  {res.text!r}",
                  flush=True)
    table = {k: {"rouge_l": float(np.mean(v)), "stderr": float(np.std(v, ddof=1) / np.sqrt(len(v))) if len(v) > 1 else 0.0,
                 "seconds_per_item": seconds[k] / len(v)} for k, v in scores.items()}
    return {"env": env_line(lm0), "items": len(items), "tokens": args.tokens, "epsilons": epsilons,
            "train_size": len(train),
            "params": params, "full_context_shots": args.full_context_shots, "table": table,
            "first_item": first, "scores": scores,
            "reference_0": items[0]["output"], "examples_0": examples, "memo_hits": lm.hits,
            "prefill_forks": lm.prefill_hits}


# ---------------------------------------------------------------------------
# merge: chunked rouge runs (--start s --items k) -> one table, paired differences and the issue-18 goal
# ---------------------------------------------------------------------------


def _mean_se(x: np.ndarray) -> tuple[float, float]:
    return float(np.mean(x)), float(np.std(x, ddof=1) / np.sqrt(x.size)) if x.size > 1 else 0.0


def _per_item(runs: list[dict]) -> dict[str, dict[int, float]]:
    per: dict[str, dict[int, float]] = {}
    for run in runs:
        if "scores" not in run:
            raise SystemExit("a run without per-item scores (written before 'scores' existed): rerun it")
        for key, vals in run["scores"].items():
            for i, v in enumerate(vals):
                item = run["first_item"] + i
                if item in per.setdefault(key, {}):
                    raise SystemExit(f"item {item} of {key!r} is in two runs")
                per[key][item] = float(v)
    return per


def merge_rouge(runs: list[dict], against: list[dict] | None = None) -> dict:
    """Join rouge runs of one model over disjoint item ranges (each JSON's ``first_item`` + ``scores``,
    per-item ROUGE-L in item order). Per key: mean +- standard error over the items the key has; and,
    where ``zero_shot`` and ``full_context`` ran on the same items, the per-item paired differences
    against zero-shot and against the goal zero_shot + (full_context - zero_shot) / 2 (issue 18).

    ``against``: runs of another setting (e.g. other mechanism params) on overlapping items; every key
    both have gets ``vs_against``, the paired difference (this - against) on the common items."""
    per = _per_item(runs)
    other = _per_item(against) if against else {}
    zs, fc = per.get("zero_shot", {}), per.get("full_context", {})
    table: dict[str, dict] = {}
    for key, by_item in sorted(per.items()):
        items = sorted(by_item)
        m, se = _mean_se(np.array([by_item[i] for i in items]))
        row: dict = {"items": len(items), "rouge_l": m, "stderr": se}
        both = [i for i in items if i in zs and i in fc]
        if key not in ("zero_shot", "full_context") and both:
            x = np.array([by_item[i] for i in both])
            z = np.array([zs[i] for i in both])
            goal = z + (np.array([fc[i] for i in both]) - z) / 2
            row["paired_items"] = len(both)
            row["vs_zero_shot"] = dict(zip(("mean", "stderr"), _mean_se(x - z)))
            row["vs_goal"] = dict(zip(("mean", "stderr"), _mean_se(x - goal)))
            row["goal"] = float(np.mean(goal))
        common = [i for i in items if i in other.get(key, {})]
        if common:
            diff = np.array([by_item[i] - other[key][i] for i in common])
            row["vs_against"] = {"items": len(common), **dict(zip(("mean", "stderr"), _mean_se(diff)))}
        table[key] = row
    return {"runs": len(runs), "table": table}


# ---------------------------------------------------------------------------
# mozo-audit: ICLInf's decoding audit (Sec. 5, App. C; app/audit/iclinf_decoding.py) ported to mozo
# ---------------------------------------------------------------------------


def bench_mozo_audit(args) -> dict:
    """For each query (one private generation, the first ``--items`` test dialogues), decode with mozo and at
    every step compute, from the same logits, the law of the released token with every expert j replaced by
    a zero-shot expert (exemplar j removed: a padded public expert, mozo's swap neighbour) and
    eps_t = max_j max(D_a(q || q_-j), D_a(q_-j || q)) at the order a* of the request's charge (ICLInf Thm
    C.6). eps_RDP = sum_t eps_t (Thm C.7), converted at a* with the accountant's conversion; the theory is
    the charged composed curve at a*, converted the same way. Data-dependent, one neighbour kind: a
    consistency check (empirical <= theoretical), not a lower bound on the worst case."""
    from app.audit.iclinf_renyi import renyi_divergence
    from app.mechanisms import mozo
    from app.mechanisms.gen_common import partition, stop_strings
    from app.mechanisms.gen_decode import decode, eos_ids, public_candidates
    from app.privacy.rdp import convert_rdp

    lm, _ = load_models(False, args.model)
    train, test = load_task()
    items = test[: args.items]
    cells = []
    for eps in [float(e) for e in args.epsilons.split(",")]:
        for mode in args.lambda_modes.split(","):
            emp_eps, emp_rdp, max_tok, lams = [], [], [], []
            th = None
            for j, item in enumerate(items):
                req = GenerationRequest.build(train, item["input"], epsilon=eps, delta=1e-5, max_tokens=args.tokens,
                                              template=TEMPLATE, params={"experts": args.experts, "group_size": args.group_size,
                                                                              "lambda_mode": mode})
                cfg = mozo.configure(req)
                cost = mozo.privacy(cfg, req)
                orders, rdp = np.asarray(cost["orders"]), np.asarray(cost["rdp"])
                a = float(convert_rdp(orders, rdp, 1e-5, "best").alpha)  # = cost["alpha"] when RDP is charged
                ia = int(np.flatnonzero(orders == a)[0])
                th = {"epsilon_charged": cost["epsilon"], "alpha": a, "rdp_at_alpha": float(rdp[ia]),
                      "epsilon_at_alpha": float(convert_rdp(orders[ia:ia + 1], rdp[ia:ia + 1], 1e-5, "best").epsilon),
                      "epsilon_per_token": cfg.epsilon_per_token}
                g = np.random.default_rng(1000 + j)
                units = partition(len(req.exemplars), cfg.experts, cfg.group_size, g)
                prompts = [build_prompt(lm, req.template, [req.exemplars[i] for i in u], req.query) for u in units]
                public = build_prompt(lm, req.template, [], req.query)
                release = mozo.chooser(cfg, g, eos_ids(lm))
                pad = cfg.weight_experts - cfg.experts
                per_token: list[float] = []

                def choose(logits, public_logits=None, release=release, per_token=per_token, cfg=cfg, pad=pad, a=a):
                    tok, info = release(logits, public_logits)
                    v = np.asarray(public_logits).reshape(-1).size
                    cand = (np.arange(v) if cfg.public_top_k is None else
                            public_candidates(public_logits, cfg.public_top_k, sorted(eos_ids(lm))))
                    base = mozo.base_distribution(public_logits, cand, cfg.uniform_mix)
                    if cfg.lambda_mode == "per_expert":
                        lam = mozo.per_expert_lambdas(logits, cand, base, cfg.epsilon_per_token, cfg.weight,
                                                      cfg.lambda_max)
                    else:
                        lam = mozo.calibrate_lambda(cfg.epsilon_per_token, cfg.weight, *mozo.two_smallest(base),
                                                    cfg.lambda_max)
                    z = np.asarray(logits, dtype=np.float64)
                    lq = mozo.step_log_probs(z, cand, base, lam, cfg.weight, pad=pad)
                    keep = np.ones(z.shape[0], dtype=bool)
                    worst = 0.0
                    for e in range(z.shape[0]):
                        keep[:] = True
                        keep[e] = False
                        lam_e = lam[keep] if isinstance(lam, np.ndarray) else lam
                        lq_e = mozo.step_log_probs(z[keep], cand, base, lam_e, cfg.weight, pad=pad + 1)
                        worst = max(worst, float(renyi_divergence(lq, lq_e, a)), float(renyi_divergence(lq_e, lq, a)))
                    per_token.append(worst)
                    return tok, info

                out = decode(lm, prompts, choose, req.max_tokens, stops=stop_strings(lm), public_prompt=public)
                r = float(np.sum(per_token))
                emp_rdp.append(r)
                emp_eps.append(float(convert_rdp(np.array([a]), np.array([r]), 1e-5, "best").epsilon))
                max_tok.append(max(per_token) if per_token else 0.0)
                lams += [s_["lambda"] for s_ in out.steps]
                print(f"[{j + 1}/{len(items)}] eps {eps:g} {mode:10s} rdp_emp {r:.4g} eps_emp {emp_eps[-1]:.3f} "
                      f"(theory at a*={a:g}: rdp {th['rdp_at_alpha']:.4g}, eps {th['epsilon_at_alpha']:.3f}) "
                      f"{out.text!r}", flush=True)
            cells.append({"epsilon": eps, "lambda_mode": mode, "theory": th, "rdp_empirical_max": max(emp_rdp),
                          "epsilon_empirical_max": max(emp_eps), "epsilon_empirical_mean": float(np.mean(emp_eps)),
                          "max_token_loss": max(max_tok), "mean_lambda": float(np.mean(lams)) if lams else None})
    return {"env": env_line(lm), "items": len(items), "tokens": args.tokens, "experts": args.experts,
            "group_size": args.group_size, "neighbour": "expert -> zero-shot expert",
            "cells": cells}


def main() -> None:
    ap = argparse.ArgumentParser(description="generation benchmarks")
    sub = ap.add_subparsers(dest="cmd", required=True)
    k = sub.add_parser("kv", help="clip-softmax time per token, KV cache vs re-encoding")
    k.add_argument("--prompts", type=int, default=50)
    k.add_argument("--tokens", type=int, default=40)
    k.add_argument("--reencode-steps", type=int, default=4)
    k.add_argument("--epsilon", type=float, default=8.0)
    k.add_argument("--clip", type=float, default=2.0)
    r = sub.add_parser("rouge", help="ROUGE-L of every mechanism on the bundled task")
    r.add_argument("--items", type=int, default=20)
    r.add_argument("--tokens", type=int, default=16)
    r.add_argument("--epsilons", default="1,4,8")
    r.add_argument("--mechanisms", default="esa,ksa,clip_softmax,poe")
    r.add_argument("--full-context-shots", type=int, default=16)
    r.add_argument("--params", default="", help="JSON overriding the per-mechanism parameters")
    r.add_argument("--public-top-k", default="", help="comma list of public_top_k values for clip_softmax/poe (0 = off)")
    r.add_argument("--no-baselines", action="store_true", help="skip zero_shot and full_context")
    r.add_argument("--threads", type=int, default=0, help="torch threads (0: leave torch's default)")
    r.add_argument("--model", default="", help="bundled model key, e.g. gemma3-270m (default: the bundled SmolLM2)")
    r.add_argument("--train-size", type=int, default=0, help="private set = the first N of the 240 training pairs "
                   "(0: all); mozo's subsample decodes one row per private exemplar")
    r.add_argument("--start", type=int, default=0, help="first test item (negative: from the end, e.g. -3 for the "
                                                          "held-out probe items test[-3:])")
    m = sub.add_parser("mozo-audit", help="ICLInf-style decoding audit of mozo (data-dependent loss vs charge)")
    m.add_argument("--items", type=int, default=5)
    m.add_argument("--tokens", type=int, default=16)
    m.add_argument("--epsilons", default="2,8")
    m.add_argument("--lambda-modes", default="public,per_expert")
    m.add_argument("--experts", type=int, default=32)
    m.add_argument("--group-size", type=int, default=1, help="exemplars per expert (mozo's group_size)")
    m.add_argument("--threads", type=int, default=0, help="torch threads (0: leave torch's default)")
    m.add_argument("--model", default="", help="bundled model key (default: the bundled SmolLM2)")
    g = sub.add_parser("merge", help="join chunked rouge runs (--out JSONs) of one model into one table")
    g.add_argument("files", nargs="+", type=Path)
    g.add_argument("--against", nargs="+", type=Path, default=None,
                   help="runs of another setting: paired differences (files - these) per shared key and item")
    for p in (k, r, m, g):
        p.add_argument("--out", type=Path, default=None, help="write the result JSON here")
    args = ap.parse_args()
    if getattr(args, "threads", 0):
        import torch

        torch.set_num_threads(args.threads)
    res = (bench_kv(args) if args.cmd == "kv" else bench_rouge(args) if args.cmd == "rouge"
           else merge_rouge([json.loads(f.read_text()) for f in args.files],
                            [json.loads(f.read_text()) for f in args.against or []]) if args.cmd == "merge"
           else bench_mozo_audit(args))
    text = json.dumps(res, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
