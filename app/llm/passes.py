"""The scoring passes of the ``hf`` backend: next-token rows, and continuation (label) scoring.

Three ways to score continuations ``c_1..c_K`` after each prompt (all the exact
teacher-forced ``sum_j log p(c_kj | prompt, c_k<j)``; they differ only in float rounding):

* **single-token fast path** (every ``c_k`` is one token, as for the bundled tasks'
  labels): one next-token pass over the prompts; ``log p(c_k | prompt)`` is read off the
  last position's distribution. One forward pass per call.
* **one pass** (multi-token labels): each prompt row carries all K continuations
  appended after it, ``prompt + c_1 + ... + c_K``, with a *prefix-sharing* attention mask
  (:func:`segment_mask`): a continuation token sees the prompt and the earlier tokens of
  its own continuation, never another continuation's; its position id continues the
  prompt's (``len(prompt) + j``), so every continuation is scored exactly as if it were
  appended alone. This is the tree attention of SpecInfer (Miao et al. 2024, Section 4.2,
  "tree-based parallel decoding") restricted to a depth-one tree of K branches. One pass,
  no KV-cache copy per (prompt, label) row.
* **two stage** (what every call did before issue 27; kept for sliding-window models,
  where a custom mask would bypass the window, and as the reference in tests): stage 1
  caches each prompt but its last token, stage 2 runs ``[last prompt token] + c_k`` for
  every pair over a copied cache.

The HF model's options pick them: ``single_token_fast_path`` (default True) and
``one_pass_scoring`` (default True).

**Label rows** (``relative_continuation_logprobs``, what ``app.icl.score_labels`` calls since issue 27):
single-token labels on the fast path read only the K label rows of the LM head, ``h @ W[labels]^T``
(plus the head's bias and the model's logit softcap, exactly as ``_logits`` applies them): the
log-probabilities less the row's full-vocabulary logsumexp, which cancels when they are renormalised
over the labels. No full-vocabulary logits, no log-softmax (49152 x 64 and 49152 x 576 for the tiny and
SmolLM2 heads). A CUDA-graph bucket captures the decoder only (cuda_graphs.py) and the head runs after
it eagerly, so graph replays read the label rows too. Multi-token labels: :meth:`continuation_logprobs`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from .kv import KVBatch, PrefixKV, cache_layers
from .tenancy import current_tenant

LM_HEAD_CHUNK = 512  # positions per lm_head call when gathering many positions


def segment_mask(seg: torch.Tensor) -> torch.Tensor:
    """(n, 1, s, s) bool attention mask (True: may attend) of new tokens among themselves.

    ``seg[i, t]`` is -1 for padding, 0 for a prompt token (seen by every later token of its
    row) and k >= 1 for a token of continuation k (seen by later tokens of continuation k
    only). Causal: a token never sees a later position. A padding query sees the prompt
    tokens before it (never nothing: an all-masked query row gives NaN in SDPA, kv.py).
    """
    s = seg.shape[1]
    causal = torch.ones((s, s), dtype=torch.bool, device=seg.device).tril()
    key, query = seg[:, None, :], seg[:, :, None]
    visible = (key >= 0) & ((key == 0) | (key == query))
    return (visible & causal)[:, None]


def attention_mask_4d(kv_mask: torch.Tensor, seg: torch.Tensor, impl: str, dtype: torch.dtype) -> torch.Tensor:
    """The full (n, 1, s, T + s) mask for ``seg``'s tokens after a cache whose real positions are
    ``kv_mask`` (n, T): boolean for SDPA-style kernels, additive float for "eager" attention."""
    n, s = seg.shape
    cached = kv_mask.bool()[:, None, None, :].expand(n, 1, s, kv_mask.shape[1])
    mask = torch.cat([cached, segment_mask(seg)], dim=-1)
    if impl == "eager":
        return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill(~mask, torch.finfo(dtype).min)
    return mask


def finish_logits(logits: torch.Tensor, softcap: float | None) -> torch.Tensor:
    """The LM head's output as the scoring code reads it: float32 (float64 for a float64 model), then the
    model's final logit softcap ``tanh(x / c) * c`` when it has one (Gemma 2)."""
    logits = logits if logits.dtype == torch.float64 else logits.float()
    if softcap:
        logits = torch.tanh(logits / softcap) * softcap
    return logits


def label_logits(lm: Any, hidden: torch.Tensor, token_ids: torch.Tensor) -> torch.Tensor:
    """(..., K) the logits of ``token_ids`` only, for hidden states (..., H): ``lm._logits(hidden)[...,
    token_ids]`` up to float rounding, computing K rows of the LM head instead of the vocabulary's."""
    head = lm._lm_head
    bias = getattr(head, "bias", None)
    with torch.inference_mode():
        logits = torch.nn.functional.linear(hidden, head.weight.index_select(0, token_ids),
                                            None if bias is None else bias.index_select(0, token_ids))
        return finish_logits(logits, lm._softcap)


def _gather_scores(lm: Any, hidden: torch.Tensor, row_idx: list[int], pos_idx: list[int], targets: list[int],
                   owner: list[int], n_out: int) -> torch.Tensor:
    """Sum of log p(target) at hidden[row, pos] per owner: (n_out,) float64 on the CPU.

    Each distinct (row, pos) goes through the LM head and its log-softmax once: the first token of
    every continuation is predicted from the same last prompt position, so with K labels a row's
    targets share few positions (issue 27: 8 rows x 5 labels of 1-2 tokens were 56 vocabulary-wide
    rows for 24 positions). Per position the numbers are the ones a row of its own would give.
    """
    totals = torch.zeros(n_out, dtype=torch.float64)
    where: dict[tuple[int, int], int] = {}
    slot = [where.setdefault((r, q), len(where)) for r, q in zip(row_idx, pos_idx)]
    uniq = list(where)
    ri = torch.as_tensor([r for r, _ in uniq], device=lm.device)
    pi = torch.as_tensor([q for _, q in uniq], device=lm.device)
    sl_t = torch.as_tensor(slot, device=lm.device)
    tt = torch.as_tensor(targets, device=lm.device)
    ow = torch.as_tensor(owner)
    picked = torch.empty(len(targets), dtype=torch.float64)
    for a in range(0, len(uniq), LM_HEAD_CHUNK):
        lp = torch.log_softmax(lm._logits(hidden[ri[a:a + LM_HEAD_CHUNK], pi[a:a + LM_HEAD_CHUNK]]), dim=-1)
        mine = ((sl_t >= a) & (sl_t < a + LM_HEAD_CHUNK)).nonzero().squeeze(1)
        picked[mine.cpu()] = lp[sl_t[mine] - a, tt[mine]].double().cpu()
    totals.index_add_(0, ow, picked)
    return totals


def graph_chunks(lm: Any, lengths: Sequence[int]) -> list[list[int]] | None:
    """Row indices cut into chunks that each replay one captured CUDA graph, or None: no graphs, or a
    row longer than every bucket (the batch then runs eagerly, with a shared prefix where one helps).

    No shared prefix on this path: on a launch-bound GPU recomputing a header inside a replay is
    cheaper than an eager prefix pass. A batch larger than every bucket (the scheduler's token budget
    on an H100 is 4x the largest bucket) runs as a few replays rather than one eager pass: an eager
    pass launches ~1,500 kernels from Python, each of which waits for the GIL again while request
    threads hold it (issue 27: 16-64 concurrent answers). Rows sorted by length, cut greedily: the
    fewest replays for that order.
    """
    graphs = getattr(lm, "graphs", None)
    if graphs is None or not lengths:
        return None
    most: dict[int, int] = {}  # length -> the most rows of it one bucket holds (asked once per length)
    chunks: list[list[int]] = []
    cur: list[int] = []
    for i in sorted(range(len(lengths)), key=lambda j: lengths[j]):  # ascending: row i is the chunk's longest
        cap = most.get(lengths[i])
        if cap is None:
            cap = most[lengths[i]] = graphs.max_rows(lengths[i])
        if cap < 1:
            return None
        if len(cur) + 1 > cap:
            chunks.append(cur)
            cur = []
        cur.append(i)
    chunks.append(cur)
    return chunks


def next_token_rows(lm: Any, rows: Sequence[Sequence[int]], token_ids: Sequence[int] | None = None, *,
                    relative: bool = False) -> np.ndarray:
    """log p(next token | row) for token rows: (B, V) float32, or (B, len(token_ids)) float64 for those tokens;
    ``relative``: those tokens' logits (:func:`label_logits`), log p less each row's logsumexp."""
    assert token_ids is not None or not relative
    width = lm.vocab_size if token_ids is None else len(token_ids)
    out = np.empty((len(rows), width), dtype=np.float32 if token_ids is None else np.float64)
    if not rows:
        return out
    picked = None if token_ids is None else torch.as_tensor(list(token_ids), device=lm.device)
    with lm._lock:
        gchunks = graph_chunks(lm, [len(r) for r in rows])
        graph = gchunks is not None
        prefix = None if graph else lm._shared_prefix(rows, cap=min(len(r) for r in rows) - 1)
        p = len(prefix) if prefix is not None else 0
        chunks = gchunks if gchunks is not None else lm._chunks([len(rows[i]) - p for i in range(len(rows))], p)
        for chunk in chunks:
            kv = KVBatch.from_prefix(prefix, len(chunk), lm.device)
            suffixes = [rows[i][p:] for i in chunk]
            # Each row's last position, on the device before the pass is queued: a host-to-device copy
            # after it would wait for the pass on a GPU (one more host wait per chunk).
            last = torch.as_tensor([len(sfx) - 1 for sfx in suffixes], device=lm.device)
            hidden = lm._forward(kv, suffixes, keep_cache=not graph)
            assert hidden is not None  # every row has a token
            h = hidden[torch.arange(len(chunk), device=lm.device), last]
            if relative:
                assert picked is not None
                out[chunk] = label_logits(lm, h, picked).double().cpu().numpy()
            else:
                lp = torch.log_softmax(lm._logits(h), dim=-1)
                out[chunk] = (lp if picked is None else lp[:, picked].double()).cpu().numpy()
            lm.stats.reused_tokens += p * len(chunk)
            if len(rows) == 1 and not graph:
                lm._remember(kv, rows[0])
    return out


def continuation_one_pass(lm: Any, prows: list[list[int]], conts: list[list[int]]) -> np.ndarray:
    """(B, K) float64 continuation scores, every (prompt, continuation) pair in one pass (module doc)."""
    k_count = len(conts)
    flat = [t for c in conts for t in c]
    seg_tail = [k + 1 for k, c in enumerate(conts) for _ in c]
    starts = np.cumsum([0] + [len(c) for c in conts])[:-1].tolist()
    out = np.zeros((len(prows), k_count), dtype=np.float64)
    with lm._lock:
        gchunks = graph_chunks(lm, [len(r) + len(flat) for r in prows])
        graph = gchunks is not None
        prefix = None if graph else lm._shared_prefix(prows, cap=min(len(r) for r in prows) - 1)
        p = len(prefix) if prefix is not None else 0
        lengths = [len(r) - p + len(flat) for r in prows]
        chunks = gchunks if gchunks is not None else lm._chunks(lengths, p)
        for chunk in chunks:
            kv = KVBatch.from_prefix(prefix, len(chunk), lm.device)
            rows, positions, segs = [], [], []
            row_idx: list[int] = []
            pos_idx: list[int] = []
            targets: list[int] = []
            owner: list[int] = []
            for gi, b in enumerate(chunk):
                n_prompt = len(prows[b])
                sfx = prows[b][p:]
                rows.append(sfx + flat)
                # A continuation token's position id continues the prompt, as if appended alone.
                positions.append(list(range(p, n_prompt)) + [n_prompt + j for c in conts for j in range(len(c))])
                segs.append([0] * len(sfx) + seg_tail)
                for k, c in enumerate(conts):
                    at = len(sfx) + starts[k]  # where c_k's first token sits in the row
                    for j, t in enumerate(c):  # c_kj is predicted from the token before it
                        row_idx.append(gi)
                        pos_idx.append(len(sfx) - 1 if j == 0 else at + j - 1)
                        targets.append(t)
                        owner.append(gi * k_count + k)
            hidden = lm._forward(kv, rows, positions=positions, segs=segs, keep_cache=not graph)
            assert hidden is not None
            out[chunk] = _gather_scores(lm, hidden, row_idx, pos_idx, targets, owner,
                                        len(chunk) * k_count).view(len(chunk), k_count).numpy()
            lm.stats.reused_tokens += p * len(chunk)
            if len(prows) == 1 and not graph and lm.prefix_reuse and len(prows[0]) >= lm.min_prefix_tokens:
                # The prompt's keys/values (its positions come first and never see a continuation).
                n = len(prows[0])
                lm.prefix_cache.put(PrefixKV(tuple(prows[0]), tuple((k[:, :, :n], v[:, :, :n])
                                                                   for k, v in cache_layers(kv.cache))),
                                    current_tenant())
    return out


def continuation_two_stage(lm: Any, prows: list[list[int]], conts: list[list[int]]) -> np.ndarray:
    """(B, K) float64 continuation scores by the two-stage path (module doc)."""
    k_count = len(conts)
    longest_cont = max(len(c) for c in conts)
    b_count = len(prows)
    out = np.zeros((b_count, k_count), dtype=np.float64)
    stage1 = [r[:-1] for r in prows]
    with lm._lock:
        prefix = lm._shared_prefix(stage1, cap=min(len(s) for s in stage1))
        p = len(prefix) if prefix is not None else 0
        lengths = [len(r) - p + longest_cont for r in prows]
        for group in lm._chunks(lengths, p, rows_per_item=k_count, passes=2):
            kv = KVBatch.from_prefix(prefix, len(group), lm.device)
            s1 = [stage1[b][p:] for b in group]
            if p == 0 and any(len(x) == 0 for x in s1):
                covered = [0] * len(group)  # an empty row would be fully masked: skip stage 1
            else:
                lm._forward(kv, s1)
                covered = [len(stage1[b]) for b in group]
                if b_count == 1:
                    lm._remember(kv, stage1[0])
            lm.stats.reused_tokens += p * len(group)
            pair_kv = kv.select([g for g in range(len(group)) for _ in range(k_count)]) if k_count > 1 else kv
            lm.stats.reused_tokens += (k_count - 1) * sum(covered)
            rows2: list[list[int]] = []
            row_idx: list[int] = []
            pos_idx: list[int] = []
            targets: list[int] = []
            owner: list[int] = []
            for gi, b in enumerate(group):
                offset = len(prows[b]) - 1 - covered[gi]
                for k, c in enumerate(conts):
                    r = len(rows2)
                    rows2.append(prows[b][covered[gi]:] + c)
                    for j, t in enumerate(c):
                        row_idx.append(r)
                        pos_idx.append(offset + j)
                        targets.append(t)
                        owner.append(gi * k_count + k)
            hidden = lm._forward(pair_kv, rows2)
            assert hidden is not None  # every pair row has a token
            out[group] = _gather_scores(lm, hidden, row_idx, pos_idx, targets, owner,
                                        len(rows2)).view(len(group), k_count).numpy()
    return out
