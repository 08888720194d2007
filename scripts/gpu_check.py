"""GPU check of the hf backend (run on a CUDA machine; CI never needs it).

Builds a small random Llama with the SmolLM2 tokenizer (the bundled weights are too
large to ship to the GPU machine), then checks on CUDA what the CPU tests check:
rows are log-distributions, a batch equals single calls, the shared-prefix path
equals plain calls, continuation scores equal a hand-written token-by-token sum,
incremental decoding equals re-encoding; and CUDA equals CPU within float32 noise.
Also times the decode session against re-encoding (s = 50, 40 steps).

    PYTHONPATH=. python scripts/gpu_check.py TOKENIZER_DIR OUT.json   # from the repository root
"""

from __future__ import annotations

import json
import sys
import time

import numpy as np
import torch


def _sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def main(tok_dir: str, out: str) -> None:
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from app.llm import ModelSpec, load_model

    torch.manual_seed(0)
    tok = AutoTokenizer.from_pretrained(tok_dir)
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=256, intermediate_size=512, num_hidden_layers=4,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048,
                      tie_word_embeddings=True)
    model = LlamaForCausalLM(cfg)
    model.save_pretrained("/tmp/tiny-llama")
    tok.save_pretrained("/tmp/tiny-llama")
    spec = ModelSpec(name="tiny", kind="lm", source="/tmp/tiny-llama")
    res: dict = {"torch": torch.__version__, "cuda": torch.cuda.is_available(),
                 "device_name": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None}
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    gpu = load_model(spec, cache_dir="/tmp/cache", device=dev, dtype="float32")
    cpu = load_model(spec, cache_dir="/tmp/cache", device="cpu", dtype="float32")
    res["capabilities"] = gpu.capabilities().to_dict()
    head = "You are a careful assistant. Classify each message into billing, shipping or refund.\n"
    prompts = [head + f"Message: {t}\nLabel:" for t in
               ["charged twice", "my parcel has not arrived after ten days", "refund please", "x",
                "where is my order number 1234 and why is it late", "invoice wrong", "return label", "hi"]]
    lp_gpu = gpu.next_token_logprobs(prompts)
    lp_cpu = cpu.next_token_logprobs(prompts)
    res["rows_logsumexp_max_abs"] = float(np.abs(np.logaddexp.reduce(lp_gpu.astype(np.float64), axis=1)).max())
    singles = np.concatenate([gpu.next_token_logprobs([p]) for p in prompts])
    res["batch_vs_single_max_abs"] = float(np.abs(lp_gpu - singles).max())
    res["cuda_vs_cpu_max_abs"] = float(np.abs(lp_gpu - lp_cpu).max())
    labels = [" billing", " shipping", " refund"]
    cont = gpu.continuation_logprobs(prompts, labels)
    # hand-written: token by token with plain forwards
    ids = [tok(p, add_special_tokens=False)["input_ids"] for p in prompts]
    hand = np.zeros_like(cont)
    with torch.no_grad():
        for b, p_ids in enumerate(ids):
            for k, lab in enumerate(labels):
                l_ids = tok(prompts[b] + lab, add_special_tokens=False)["input_ids"][len(p_ids):]
                full = torch.tensor([p_ids + l_ids], device=gpu.device)
                logits = gpu.model(full).logits[0].float().log_softmax(-1)
                hand[b, k] = sum(float(logits[len(p_ids) - 1 + j, t]) for j, t in enumerate(l_ids))
    res["continuation_vs_hand_max_abs"] = float(np.abs(cont - hand).max())
    # decode session vs re-encoding, and its speed
    s, steps = (50, 40) if torch.cuda.is_available() else (4, 3)
    dec_prompts = [head + f"Message: ticket {i}\nLabel:" for i in range(s)]
    _sync()
    t0 = time.perf_counter()
    sess = gpu.start_decode(dec_prompts)
    logits = sess.logits
    chosen = []
    for _ in range(steps):
        t = int(np.argmax(logits.mean(axis=0)))
        chosen.append(t)
        logits = sess.step(t)
    _sync()
    t_kv = time.perf_counter() - t0
    t0 = time.perf_counter()
    re_steps = 5
    for j in range(re_steps):
        gpu.next_token_logprobs([p + tok.decode(chosen[:j]) for p in dec_prompts])
    _sync()
    t_re = (time.perf_counter() - t0) / re_steps * steps
    sess2 = gpu.start_decode(dec_prompts)
    for t in chosen[:3]:
        last = sess2.step(t)
    re_ids = [tok(p, add_special_tokens=False)["input_ids"] + chosen[:3] for p in dec_prompts[:4]]
    with torch.no_grad():
        ref = torch.stack([gpu.model(torch.tensor([r], device=gpu.device)).logits[0, -1].float() for r in re_ids])
    res["decode_vs_reencode_max_abs_logit"] = float(np.abs(last[:4] - ref.cpu().numpy()).max())
    res["decode_seconds_per_token_kv"] = t_kv / steps
    res["decode_seconds_per_token_reencode"] = t_re / steps
    res["kv_speedup"] = t_re / t_kv
    print(json.dumps(res, indent=2))
    with open(out, "w") as f:
        json.dump(res, f, indent=2)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
