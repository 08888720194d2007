"""GPU check of the model-side scoring paths (issue 27): per-answer forward time and equality.

Builds a random-init model with the bundled SmolLM2-135M's architecture and tokenizer (no weights
needed: only config.json and the tokenizer files) and times, for ``rnm``-shaped scoring batches,
the model call one answer makes (``HFLanguageModel._continuation_rows``: what the batch scheduler
hands the model), per answer:

* ``two_pass``: the path before issue 27 (prompts, then every (prompt, label) pair over copied caches);
* ``one_pass``: single-token fast path / one-pass multi-token scoring, eager;
* ``one_pass_graphs``: the same through captured CUDA graphs (app/llm/cuda_graphs.py);
* ``batched_16`` / ``batched_64``: 16 or 64 answers' rows coalesced into one model call (what the
  scheduler does under load), one pass each where the budget allows; per answer.

Workloads: ``rnm_8x4`` (8 partition prompts of ~120 tokens, a shared ~40-token header, 5 single-token
labels), ``rnm_2x1`` (2 prompts of ~55 tokens), ``rnm_8x4_multi`` (the same with 5 labels of 1-3 tokens).
It checks that the graph path's label log-probs equal eager's within tolerance (float32 model, and
bf16 reported), times the start-up capture of the default buckets, and, where torch.profiler works,
the GPU kernel time per answer and the fraction of wall time the GPU is busy. Prints one JSON summary
(and writes it to ``--out``). Imports only app/llm (torch, transformers, numpy): no web stack.

    # here, once: copy the tokenizer/config files next to the repo (a folder to carry to the GPU)
    python benchmarks/gpu_check.py --prepare .gpu_assets
    # on the GPU machine (~2-3 minutes):
    python3 benchmarks/gpu_check.py --assets .gpu_assets --out $OUT/gpu_check.json
    # CPU smoke test of the whole script with a 2-layer model:
    python benchmarks/gpu_check.py --device cpu --tiny
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.llm.cuda_graphs import GraphForward, GraphOptions  # noqa: E402
from app.llm.tiny import TOKENIZER_FILES, random_lm  # noqa: E402

WORKLOADS = {
    # name: (prompts per answer, header tokens, tail tokens (mean), label token lengths)
    "rnm_8x4": (8, 40, 80, [1, 1, 1, 1, 1]),
    "rnm_2x1": (2, 25, 30, [1, 1, 1, 1, 1]),
    "rnm_8x4_multi": (8, 40, 80, [1, 2, 3, 2, 1]),
}


def default_assets() -> Path:
    env = os.environ.get("DPICL_MODEL_CACHE_DIR")
    cache = Path(env).expanduser() if env else Path.home() / ".cache" / "dpicl" / "models"
    return cache / "smollm2-135m-instruct"


def prepare(dest: Path) -> None:
    """Copy the bundled model's config and tokenizer files (not its weights) into ``dest``."""
    src = default_assets()
    if not (src / "config.json").exists():
        from app.llm import bundled_specs, load_model  # converts the bundled GGUF once

        spec = next(s for s in bundled_specs() if s.kind == "lm")
        load_model(spec, cache_dir=src.parent, device="cpu", dtype="float32")
    dest.mkdir(parents=True, exist_ok=True)
    for name in TOKENIZER_FILES:
        if (src / name).exists():
            shutil.copy2(src / name, dest / name)
    print(f"copied {sorted(p.name for p in dest.iterdir())} to {dest}")


def make_answers(lm: Any, workload: str, n_answers: int, seed: int) -> tuple[list[list[list[int]]], list[list[int]]]:
    """``n_answers`` answers' prompt token rows (one shared header per answer batch) and the label tokens."""
    n_prompts, header, tail, label_lens = WORKLOADS[workload]
    rng = np.random.default_rng(seed)
    vocab = min(lm.vocab_size, 49152)
    head = rng.integers(100, vocab, header).tolist()
    answers = []
    for _ in range(n_answers):
        query = rng.integers(100, vocab, 12).tolist()
        rows = []
        for _ in range(n_prompts):
            ex = rng.integers(100, vocab, max(4, tail - 12 + int(rng.integers(-10, 11)))).tolist()
            rows.append(head + ex + query)
        answers.append(rows)
    labels = [rng.integers(100, vocab, n).tolist() for n in label_lens]
    return answers, labels


def set_path(lm: Any, path: str, graphs: GraphForward | None) -> None:
    two = path == "two_pass"
    lm.single_token_fast_path = lm.one_pass_scoring = not two
    lm.graphs = graphs if path.endswith("graphs") else None
    lm.clear_prefix_cache()


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_calls(lm: Any, batches: list[list[list[int]]], labels: list[list[int]], per_call_answers: int,
               reps: int) -> dict[str, Any]:
    """Median seconds per answer over ``reps`` calls (after two warm-up calls), and passes per call."""
    for b in batches[:2]:
        lm._continuation_rows(b, labels)
    sync(lm.device)
    times = []
    lm.stats.reset()
    for i in range(reps):
        rows = batches[i % len(batches)]
        t0 = time.perf_counter()
        lm._continuation_rows(rows, labels)
        sync(lm.device)
        times.append(time.perf_counter() - t0)
    st = lm.stats.snapshot()
    return {"ms_per_answer": round(1000 * statistics.median(times) / per_call_answers, 3),
            "ms_per_call": round(1000 * statistics.median(times), 3),
            "passes_per_call": round(st["forward_calls"] / reps, 2),
            "padded_tokens_per_call": int(st["padded_tokens"] / reps)}


def profile_calls(lm: Any, batches: list[list[list[int]]], labels: list[list[int]], per_call_answers: int,
                  reps: int) -> dict[str, Any] | None:
    """GPU kernel time per answer and the busy fraction of wall time (torch.profiler), or None."""
    if lm.device.type != "cuda":
        return None
    try:
        from torch.profiler import ProfilerActivity, profile

        lm._continuation_rows(batches[0], labels)
        sync(lm.device)
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            t0 = time.perf_counter()
            for i in range(reps):
                lm._continuation_rows(batches[i % len(batches)], labels)
            sync(lm.device)
            wall = time.perf_counter() - t0
        kernel_us = sum(getattr(e, "self_device_time_total", 0.0) or getattr(e, "self_cuda_time_total", 0.0)
                        for e in prof.key_averages())
        answers = reps * per_call_answers
        return {"kernel_ms_per_answer": round(kernel_us / 1000 / answers, 3),
                "gpu_busy_fraction": round(kernel_us / 1e6 / wall, 3) if wall > 0 else None,
                "wall_ms_per_answer_profiled": round(1000 * wall / answers, 3)}
    except Exception as exc:  # a profiler that does not work here must not lose the timings
        return {"error": f"{type(exc).__name__}: {exc}"[:200]}


def equality(lm: Any, graphs: GraphForward | None, answers: list[list[list[int]]],
             labels: list[list[int]]) -> dict[str, Any]:
    """Max |graph - eager| and |one-pass - two-pass| of label log-probs over the answers, argmax agreement."""
    out: dict[str, Any] = {}
    got: dict[str, np.ndarray] = {}
    graphed = graphs is not None and (bool(graphs.buckets) or not graphs.capture)
    paths = ["two_pass", "one_pass"] + (["one_pass_graphs"] if graphed else [])
    for path in paths:
        set_path(lm, path, graphs)
        got[path] = np.concatenate([lm._continuation_rows(a, labels) for a in answers])
    for path in paths[1:]:
        ref = "one_pass" if path == "one_pass_graphs" else "two_pass"
        d = np.abs(got[path] - got[ref])
        out[f"{path}_vs_{ref}"] = {"max_abs": float(d.max()),
                                   "argmax_agree": float((got[path].argmax(1) == got[ref].argmax(1)).mean())}
    if graphed and all(len(lab) == 1 for lab in labels):
        # what rnm's scoring calls: the labels' LM head rows (relative), through GraphForward.last_hidden
        from app.llm import passes

        ids = [lab[0] for lab in labels]
        rel = {}
        for path in ("one_pass", "one_pass_graphs"):
            set_path(lm, path, graphs)
            rel[path] = np.concatenate([passes.next_token_rows(lm, a, ids, relative=True) for a in answers])
        d = np.abs(rel["one_pass_graphs"] - rel["one_pass"])
        out["label_rows_graphs_vs_eager"] = {
            "max_abs": float(d.max()),
            "argmax_agree": float((rel["one_pass_graphs"].argmax(1) == rel["one_pass"].argmax(1)).mean())}
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--tiny", action="store_true", help="a 2-layer shrunken model (CPU smoke test)")
    ap.add_argument("--assets", default=None, help="folder with config.json + tokenizer files")
    ap.add_argument("--prepare", default=None, metavar="DIR", help="copy the assets into DIR and exit")
    ap.add_argument("--reps", type=int, default=None, help="timed calls per measurement (default 20 GPU, 3 CPU)")
    ap.add_argument("--warmup-s", type=float, default=45.0, help="CUDA graph capture time limit at start-up")
    ap.add_argument("--compile", action="store_true", help="also time torch.compile(mode='reduce-overhead')")
    ap.add_argument("--quick", action="store_true",
                    help="rnm_8x4 only, without the two-pass path and 64-answer calls (~1/3 of the time)")
    ap.add_argument("--out", default=None, help="write the JSON summary here (default $OUT/gpu_check.json)")
    args = ap.parse_args()
    if args.prepare:
        prepare(Path(args.prepare))
        return 0
    t_start = time.perf_counter()
    torch.set_num_threads(1)
    device = torch.device(args.device)
    assets = Path(args.assets) if args.assets else default_assets()
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    reps = args.reps or (20 if device.type == "cuda" else 3)
    lm = random_lm(assets, tiny=args.tiny, device=str(device), dtype=dtype, options={"cuda_graphs": "off"})
    summary: dict[str, Any] = {
        "model": f"random-init, {'2-layer tiny' if args.tiny else 'SmolLM2-135M architecture'}, tokenizer "
                 f"from {assets.name}", "device": str(device), "dtype": str(dtype).removeprefix("torch."),
        "gpu": torch.cuda.get_device_name(device) if device.type == "cuda" else None,
        "torch": torch.__version__, "max_batch_tokens": lm.max_batch_tokens, "reps": reps}
    import transformers

    summary["transformers"] = transformers.__version__

    # Start-up capture of the default buckets (what the server does), bounded and timed.
    graphs: GraphForward | None = None
    if device.type == "cuda":
        opts = GraphOptions(mode="graph", warmup_s=args.warmup_s)
        graphs = GraphForward(lm._base, device, lm._pad_id, opts, dtype=dtype)
        summary["graph_warmup"] = graphs.warm()
        summary["graph_warmup"]["captured"] = len(summary["graph_warmup"]["captured"])
    else:  # CPU: the bucketed path runs eagerly (padding and masks only), so the script's logic is exercised
        graphs = GraphForward(lm._base, device, lm._pad_id, GraphOptions(mode="graph"), capture=False,
                              dtype=dtype)

    results: dict[str, Any] = {}
    for workload in ["rnm_8x4"] if args.quick else list(WORKLOADS):
        answers, labels = make_answers(lm, workload, 64, seed=1)
        res: dict[str, Any] = {}
        for path in ("one_pass", "one_pass_graphs") if args.quick else ("two_pass", "one_pass", "one_pass_graphs"):
            set_path(lm, path, graphs)
            res[path] = time_calls(lm, answers, labels, 1, reps)
            if workload == "rnm_8x4":
                res[path]["profile"] = profile_calls(lm, answers, labels, 1, min(reps, 10))
        for k in (16,) if args.quick else (16, 64):
            merged = [[r for a in answers[i:i + k] for r in a] for i in range(0, len(answers), k)]
            for path in ("one_pass", "one_pass_graphs"):
                set_path(lm, path, graphs)
                res[f"batched_{k}_{path}"] = time_calls(lm, merged, labels, k, max(3, reps // 4))
        res["equality"] = equality(lm, graphs, answers[:8], labels)
        results[workload] = res
        print(json.dumps({workload: res}), flush=True)
    summary["workloads"] = results

    if device.type == "cuda":
        # float32 model: graph replay vs eager on the same weights, within the float32 tolerances.
        lm32 = random_lm(assets, tiny=args.tiny, device=str(device), dtype=torch.float32,
                         options={"cuda_graphs": "off"})
        g32 = GraphForward(lm32._base, device, lm32._pad_id,
                           GraphOptions(mode="graph", rows=(8, 16), lengths=(128, 160), warmup_s=30),
                           dtype=torch.float32)
        g32.warm()
        answers, labels = make_answers(lm32, "rnm_8x4", 4, seed=2)
        eq = equality(lm32, g32, answers, labels)
        summary["float32_equality"] = eq
        summary["float32_equal_within_2e-3"] = all(v["max_abs"] <= 2e-3 for v in eq.values())
        del lm32, g32
        if args.compile:
            gc = GraphForward(lm._base, device, lm._pad_id,
                              GraphOptions(mode="compile", rows=(8,), lengths=(128, 160), warmup_s=90),
                              dtype=dtype)
            summary["compile_warmup"] = gc.warm()
            answers, labels = make_answers(lm, "rnm_8x4", 8, seed=1)
            set_path(lm, "one_pass_graphs", gc)
            summary["compile_rnm_8x4"] = time_calls(lm, answers, labels, 1, reps)
    tt = results["rnm_8x4"]
    summary["rnm_8x4_answers_per_s_forward_only"] = {
        k: round(1000 / v["ms_per_answer"], 1) for k, v in tt.items() if isinstance(v, dict) and "ms_per_answer" in v}
    summary["seconds"] = round(time.perf_counter() - t_start, 1)
    text = json.dumps(summary, indent=1)
    print(text)
    out = args.out or (os.path.join(os.environ["OUT"], "gpu_check.json") if os.environ.get("OUT") else None)
    if out:
        Path(out).write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
