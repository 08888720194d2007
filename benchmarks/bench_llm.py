"""Benchmarks for app.llm (issue 8): forward throughput, shared-prefix reuse, cold load.

    python benchmarks/bench_llm.py                  # table
    python benchmarks/bench_llm.py --json           # machine-readable
    python benchmarks/bench_llm.py --threads 1      # torch.set_num_threads before anything runs

What it measures, on the bundled SmolLM2-135M-Instruct (float32, CPU unless CUDA):
  1. bare batched forward pass (decoder + LM head at the last position), tokens/s:
     the ceiling every later feature is measured against;
  2. 16 prompts sharing a 100-token prefix (chat header + instruction), next-token
     log-probabilities: 16 independent sequential calls without reuse vs one
     batched call with prefix reuse (same process), the ratio, and the tokens
     actually computed; also continuation scoring of 4 labels;
  3. cold load from the safetensors cache in a fresh process (seconds), and the
     RSS and peak RSS (VmHWM; ru_maxrss would count the forked parent) of a
     process that loads and uses both bundled models.
Needs the model cache (the first run converts the GGUF, ~40 s).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

DEFAULT_CACHE = os.environ.get("DPICL_MODEL_CACHE_DIR", str(Path.home() / ".cache" / "dpicl" / "models"))

INSTRUCTION = (
    "You label news articles. Read the article and answer with exactly one topic word from this list: "
    "World, Sports, Business, Technology. Do not explain your answer."
)
SUFFIXES = [
    "Stocks rallied after the central bank held interest rates steady.",
    "The striker scored twice as the home side won the cup final.",
    "A new phone chip doubles battery life, the company said.",
    "Leaders met in Geneva to discuss the ceasefire agreement.",
    "Oil prices fell for a third straight week on weak demand.",
    "The tennis champion withdrew from the tournament with an injury.",
    "Researchers released an open-source model that writes code.",
    "Floods displaced thousands of people across the region.",
    "The airline reported record profits for the summer quarter.",
    "The coach was fired after a run of eight straight defeats.",
    "A startup raised funding to build cheaper solar panels.",
    "Protesters gathered outside parliament for a second day.",
    "Retail sales rose more than expected in October.",
    "The marathon record fell by eleven seconds on Sunday.",
    "Engineers tested a reusable rocket booster in the desert.",
    "The prime minister called an early general election.",
]
LABELS = [" World", " Sports", " Business", " Technology"]


def _timeit(fn, repeat: int) -> tuple[float, object]:
    times, out = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def shared_prefix_prompts(lm, prefix_tokens: int = 100) -> tuple[list[str], int]:
    """16 chat prompts whose token sequences share exactly the first ``prefix_tokens`` tokens."""
    head = lm.apply_chat_template(
        [{"role": "system", "content": INSTRUCTION}, {"role": "user", "content": "\x00"}]
    ).split("\x00")[0]
    filler = " Articles come from many newspapers and wires; some are short, some long; all are in English."
    text = head + "Article:"
    while len(lm.tokenize(text)) < prefix_tokens + 5:
        text += filler
    ids = lm.tokenize(text)[:prefix_tokens]
    prefix = lm.detokenize(ids, skip_special_tokens=False)
    prompts = [
        prefix + "\n\n" + s + "<|im_end|>\n<|im_start|>assistant\nTopic:" for s in SUFFIXES
    ]
    rows = [lm.tokenize(p) for p in prompts]
    common = 0
    while all(len(r) > common and r[common] == rows[0][common] for r in rows):
        common += 1
    return prompts, common


def bench_forward(lm, repeat: int) -> list[dict]:
    import torch

    out = []
    for batch, length in [(1, 128), (8, 128), (16, 128)]:
        ids = torch.randint(100, 40000, (batch, length))

        def run(ids=ids):
            with torch.inference_mode():
                h = lm.model.model(input_ids=ids).last_hidden_state
                return lm.model.get_output_embeddings()(h[:, -1])

        run()  # warm-up
        t, _ = _timeit(run, repeat)
        out.append({"batch": batch, "length": length, "seconds": round(t, 4), "tokens_per_s": round(batch * length / t, 1)})
    return out


def bench_prefix(lm, repeat: int) -> dict:
    import numpy as np

    prompts, common = shared_prefix_prompts(lm)
    rows = [lm.tokenize(p) for p in prompts]
    total = sum(len(r) for r in rows)

    def variant(reuse: bool, batched: bool, clear_each: bool = True):
        lm.prefix_reuse = reuse

        def run():
            if clear_each:
                lm.clear_prefix_cache()
            lm.stats.reset()
            if batched:
                return lm.next_token_logprobs(prompts)
            return np.stack([lm.next_token_logprobs([p])[0] for p in prompts])

        run()  # warm-up
        t, lp = _timeit(run, repeat)
        return t, lp, lm.stats.snapshot()

    results = {}
    base_t, base_lp, base_s = variant(reuse=False, batched=False)
    results["sequential_no_reuse"] = {"seconds": base_t, "tokens_computed": base_s["forward_tokens"]}
    t, lp, s = variant(reuse=False, batched=True)
    results["batched_no_reuse"] = {"seconds": t, "tokens_computed": s["forward_tokens"], "padded": s["padded_tokens"],
                                   "max_abs_diff": float(np.abs(lp - base_lp).max())}
    t, lp, s = variant(reuse=True, batched=True)
    results["batched_prefix_reuse"] = {"seconds": t, "tokens_computed": s["forward_tokens"], "padded": s["padded_tokens"],
                                       "max_abs_diff": float(np.abs(lp - base_lp).max())}
    t, lp, s = variant(reuse=True, batched=False, clear_each=True)
    results["sequential_prefix_lru"] = {"seconds": t, "tokens_computed": s["forward_tokens"],
                                        "max_abs_diff": float(np.abs(lp - base_lp).max())}
    for v in results.values():
        v["seconds"] = round(v["seconds"], 4)
        v["speedup_vs_sequential"] = round(base_t / v["seconds"], 2)

    # continuation scoring: 16 prompts x 4 labels
    lm.prefix_reuse = True
    lm.clear_prefix_cache()
    lm.stats.reset()
    t_cont, _ = _timeit(lambda: (lm.clear_prefix_cache(), lm.continuation_logprobs(prompts, LABELS)), repeat)
    cont_tokens = lm.stats.forward_tokens // repeat
    labels = [lm.tokenize(c) for c in LABELS]
    naive_cont = sum(len(r) + len(c) for r in rows for c in labels)
    lm.prefix_reuse = True
    return {
        "prompts": len(prompts),
        "shared_prefix_tokens": common,
        "prompt_tokens_total": total,
        "variants": results,
        "ratio_sequential_over_batched_reuse": results["batched_prefix_reuse"]["speedup_vs_sequential"],
        "continuation_4_labels": {"seconds": round(t_cont, 4), "tokens_computed": cont_tokens,
                                  "tokens_one_row_per_pair": naive_cont},
    }


_LOAD_SNIPPET = r"""
import json, os, sys, time
t0 = time.perf_counter()
sys.path.insert(0, {root!r})
import torch
if {threads}: torch.set_num_threads({threads})
from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaForCausalLM, LlamaConfig  # lazy modules
import sentence_transformers
from app.llm import bundled_specs, load_model
t1 = time.perf_counter()
lm_spec, emb_spec = bundled_specs()
lm = load_model(lm_spec, cache_dir={cache!r}, device="cpu", dtype="float32")
t2 = time.perf_counter()
lm.next_token_logprobs(["Hello"])
t3 = time.perf_counter()
emb = load_model(emb_spec, cache_dir={cache!r}, device="cpu", dtype="float32")
t4 = time.perf_counter()
emb.embed(["hello"])
print(json.dumps({{"import_s": t1 - t0, "lm_load_s": t2 - t1, "first_call_s": t3 - t2,
                   "embedder_load_s": t4 - t3,
                   **{{k: int(v.split()[0]) / 1024 for k, v in
                      (line.split(":", 1) for line in open("/proc/self/status"))
                      if k in ("VmRSS", "VmHWM")}}}}))
"""


def bench_load(cache: str, repeat: int, threads: int) -> dict:
    runs = []
    for _ in range(repeat):
        code = _LOAD_SNIPPET.format(root=str(ROOT), cache=cache, threads=threads)
        env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_VERBOSITY="error")
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
        runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
    med = {k: round(statistics.median(r[k] for r in runs), 3) for k in runs[0]}
    med["runs"] = repeat
    return med


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--cache-dir", default=DEFAULT_CACHE)
    ap.add_argument("--skip-load", action="store_true")
    args = ap.parse_args(argv)

    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    from app.llm import bundled_specs, load_model

    lm = load_model(bundled_specs()[0], cache_dir=args.cache_dir, device="auto", dtype="float32")
    report = {
        "machine": {"python": platform.python_version(), "torch": torch.__version__, "cpus": os.cpu_count(),
                    "torch_threads": torch.get_num_threads(), "device": str(lm.device),
                    "loadavg_1m": os.getloadavg()[0]},
        "forward": bench_forward(lm, args.repeat),
        "prefix_reuse": bench_prefix(lm, args.repeat),
    }
    if not args.skip_load:
        report["cold_load"] = bench_load(args.cache_dir, args.repeat, args.threads)
    report["machine"]["loadavg_1m_end"] = os.getloadavg()[0]

    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    m = report["machine"]
    print(f"machine: {m['cpus']} CPUs, torch {m['torch']} ({m['torch_threads']} threads), device {m['device']}, "
          f"load average {m['loadavg_1m']:.1f} -> {m['loadavg_1m_end']:.1f}")
    print("\n1. bare batched forward pass (decoder + LM head at the last position)")
    for r in report["forward"]:
        print(f"   batch {r['batch']:>2} x {r['length']} tokens: {r['seconds']*1e3:8.1f} ms  {r['tokens_per_s']:8.1f} tokens/s")
    p = report["prefix_reuse"]
    print(f"\n2. {p['prompts']} prompts sharing a {p['shared_prefix_tokens']}-token prefix "
          f"({p['prompt_tokens_total']} prompt tokens in all), next-token log-probabilities")
    for name, v in p["variants"].items():
        diff = f"  max|diff| {v['max_abs_diff']:.1e}" if "max_abs_diff" in v else ""
        print(f"   {name:<24} {v['seconds']*1e3:8.1f} ms  x{v['speedup_vs_sequential']:<5} "
              f"tokens computed {v['tokens_computed']:>5}{diff}")
    c = p["continuation_4_labels"]
    print(f"   continuation scoring, 4 labels: {c['seconds']*1e3:.1f} ms, {c['tokens_computed']} tokens computed "
          f"(one row per (prompt, label) would be {c['tokens_one_row_per_pair']})")
    if "cold_load" in report:
        cl = report["cold_load"]
        print(f"\n3. cold load from the safetensors cache (fresh process, median of {cl['runs']}):")
        print(f"   import torch+transformers+app.llm {cl['import_s']:.2f} s, LM load {cl['lm_load_s']:.2f} s, "
              f"first call {cl['first_call_s']:.2f} s, embedder load {cl['embedder_load_s']:.2f} s, "
              f"RSS {cl['VmRSS']:.0f} MB (peak {cl['VmHWM']:.0f} MB) with both models loaded and used")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
