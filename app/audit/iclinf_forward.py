"""Score a family of prompts that share prefixes, computing every distinct token once.

ICLInf (Eq. 4) scores, for one query, the prompt with all n exemplars and the n
leave-one-out prompts (plus their content-free twins with calibration). The
leave-one-out prompt without exemplar i shares everything before exemplar i
with the full prompt; the twins share everything but the query. The token
sequences form a trie, and the least work any prefix-sharing backend can do is
one forward position per trie node.

:func:`score_family` does exactly that on the ``hf`` backend: rounds of one
batched forward each. A round extends rows of a pool of already computed
sequences; a new row starts from the pool row it shares the longest prefix
with, whose cache is cut to that prefix by masking (``app.llm.kv`` "holes":
positions are logical, masked keys are never seen), so batched numbers equal
one-at-a-time numbers. Rows that would share a longer prefix with each other
than with the pool wait for a later round (one of them goes first). The
prefix common to every row comes from the model's LRU of prefix caches
(shared across queries: the instruction). Other backends, and anything the
hf backend refuses (Gemma's sliding window with holes), go through the plain
batched protocol calls ``continuation_logprobs`` / ``next_token_logprobs``:
one call for the whole family.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["FamilyScores", "TrieCounts", "score_family", "supports_trie", "trie_counts"]


@dataclass
class TrieCounts:
    """Work counters of one :func:`score_family` call (tokens are row-tokens)."""

    rows: int = 0  # distinct sequences scored (prompts, and prompt + label prefix for multi-token labels)
    tokens_naive: int = 0  # sum of row lengths: no sharing at all
    tokens_minimum: int = 0  # trie nodes not already in the model's prefix cache: the least any prefix-sharing backend computes
    tokens_computed: int = 0  # what this call ran through the model (common prefix included when not cached)
    common_prefix: int = 0  # tokens shared by every row (served by the model's prefix LRU when cached)
    forward_calls: int = 0
    path: str = "trie"  # "trie" or "plain"

    def add(self, other: TrieCounts) -> None:
        for k in ("rows", "tokens_naive", "tokens_minimum", "tokens_computed", "forward_calls"):
            setattr(self, k, getattr(self, k) + getattr(other, k))

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class FamilyScores:
    """``label_logprobs`` (B, K) float64: sum_j log p(c_kj | prompt_b, c_k<j) (teacher forced);
    ``next_logprobs`` (B, V) float32 next-token log-probabilities, when asked for."""

    label_logprobs: np.ndarray | None
    next_logprobs: np.ndarray | None
    counts: TrieCounts = field(default_factory=TrieCounts)


def supports_trie(lm: Any) -> bool:
    """The hf backend with prefix reuse (it exposes its forward core and KV batches)."""
    return bool(getattr(lm, "prefix_reuse", False)) and all(
        hasattr(lm, a) for a in ("_forward", "_logits", "_prefix_kv", "_lock", "_encode_plain", "device")
    )


def trie_counts(rows: Sequence[Sequence[int]], below: int = 0) -> int:
    """Number of trie nodes of ``rows`` (distinct non-empty prefixes), minus ``below`` shared root tokens.

    Sorted order: each row adds its length minus its common prefix with the previous one."""
    srt = sorted(tuple(r) for r in rows)
    total = 0
    prev: tuple[int, ...] = ()
    for r in srt:
        total += len(r) - _lcp(r, prev)
        prev = r
    return total - (below if srt else 0)


def _lcp(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def score_family(
    lm: Any,
    prompts: Sequence[str],
    continuations: Sequence[str] | None = None,
    *,
    full: bool = False,
    use_trie: bool | None = None,
) -> FamilyScores:
    """Score every prompt: label continuations (``continuations``, e.g. ``[" billing", ...]``) and/or the
    full next-token distribution (``full``), computing each distinct token position once (trie path).

    ``use_trie``: None = when the backend supports it; False = the plain batched protocol calls.
    """
    if isinstance(prompts, str):
        raise TypeError("prompts must be a sequence of strings")
    if continuations is None and not full:
        raise ValueError("ask for continuations, the full distribution, or both")
    trie = supports_trie(lm) if use_trie is None else (use_trie and supports_trie(lm))
    if trie:
        try:
            return _score_trie(lm, list(prompts), None if continuations is None else list(continuations), full)
        except Exception as exc:  # e.g. CapabilityError: sliding window with holes; fall back to plain calls
            if type(exc).__name__ != "CapabilityError":
                raise
    return _score_plain(lm, list(prompts), None if continuations is None else list(continuations), full)


def _score_plain(lm: Any, prompts: list[str], conts: list[str] | None, full: bool) -> FamilyScores:
    counts = TrieCounts(path="plain")
    stats = getattr(lm, "stats", None)
    before = stats.snapshot() if stats is not None else None
    label = None
    if conts is not None:
        label = np.asarray(lm.continuation_logprobs(prompts, conts), dtype=np.float64)
    nxt = np.asarray(lm.next_token_logprobs(prompts), dtype=np.float32) if full else None
    counts.rows = len(prompts)
    if stats is not None and before is not None:
        after = stats.snapshot()
        counts.tokens_computed = after["forward_tokens"] - before["forward_tokens"]
        counts.forward_calls = after["forward_calls"] - before["forward_calls"]
    if hasattr(lm, "tokenize"):
        rows = [lm.tokenize(p) for p in prompts]
        counts.tokens_naive = sum(len(r) for r in rows)
    return FamilyScores(label, nxt, counts)


def _score_trie(lm: Any, prompts: list[str], conts: list[str] | None, full: bool) -> FamilyScores:
    import torch

    from app.llm.kv import KVBatch

    prows = [lm.tokenize(p) for p in prompts]
    if any(len(r) == 0 for r in prows):
        raise ValueError("every prompt needs at least one token")
    ctoks = [lm._encode_plain(c) for c in conts] if conts is not None else []
    # Requested nodes: a node is a token prefix X; its output is the next-token distribution after X.
    # Prompt b needs node X_b (full distribution and/or first label token), and X_b + c[:j] for the
    # later tokens of multi-token labels.
    want_full: set[tuple[int, ...]] = set()
    want_tok: dict[tuple[int, ...], set[int]] = {}
    for r in prows:
        x = tuple(r)
        if full:
            want_full.add(x)
        for c in ctoks:
            for j, t in enumerate(c):
                want_tok.setdefault(x + tuple(c[:j]), set()).add(int(t))
    nodes = set(want_full) | set(want_tok)
    # Rows: maximal nodes (a node that is a prefix of another is computed on the way).
    uniq = sorted(nodes)
    rows = [list(u) for i, u in enumerate(uniq) if not (i + 1 < len(uniq) and uniq[i + 1][: len(u)] == u)]
    lengths = sorted({len(n) for n in nodes})
    # For each row: the requested node lengths along it.
    row_nodes = [[L for L in lengths if L <= len(r) and tuple(r[:L]) in nodes] for r in rows]

    counts = TrieCounts(rows=len(rows), tokens_naive=sum(len(r) for r in rows))
    out_full: dict[tuple[int, ...], np.ndarray] = {}
    out_tok: dict[tuple[int, ...], dict[int, float]] = {}
    stats = getattr(lm, "stats", None)
    before = stats.snapshot() if stats is not None else None

    with lm._lock:
        # The prefix common to all rows, capped so that every requested node is computed here.
        common = rows[0]
        for r in rows[1:]:
            common = common[: _lcp(common, r)]
        common = common[: min(len(n) for n in nodes) - 1]
        f0 = stats.forward_tokens if stats is not None else 0
        prefix = lm._prefix_kv(common)
        p = len(prefix) if prefix is not None else 0
        cached = p - ((stats.forward_tokens - f0) if stats is not None else 0)  # served by the prefix LRU
        counts.common_prefix = p
        counts.tokens_minimum = trie_counts(rows, below=cached)
        pool = KVBatch.from_prefix(prefix, 1, lm.device) if p else KVBatch.empty(1, lm.device)
        pool_tokens: list[list[int]] = [list(common[:p])]
        remaining = list(range(len(rows)))
        while remaining:
            # Best parent (deepest shared prefix) of every remaining row; keep only pool rows in use.
            best = []
            for r in remaining:
                c, d = max(((ci, _lcp(rows[r], pt)) for ci, pt in enumerate(pool_tokens)), key=lambda t: t[1])
                best.append((c, d))
            used = sorted({c for c, _ in best})
            if len(used) < pool.n:
                remap = {c: i for i, c in enumerate(used)}
                pool = pool.select(used)
                pool_tokens = [pool_tokens[c] for c in used]
                best = [(remap[c], d) for c, d in best]
            # One representative per group of rows that share more with each other than with the pool.
            groups: dict[tuple[int, ...], int] = {}
            reps, deferred = [], []
            for (r, (c, d)) in zip(remaining, best):
                key = tuple(rows[r][: d + 1])
                if key in groups:
                    deferred.append(r)
                else:
                    groups[key] = r
                    reps.append((r, c, d))
            kv = pool.select([c for _, c, _ in reps])
            depth = torch.as_tensor([d for _, _, d in reps], dtype=torch.long, device=lm.device)
            if kv.physical_length:
                # Cut each row to its first d real tokens: later positions become masked holes.
                keep = (kv.mask.cumsum(1) <= depth[:, None]).to(kv.mask.dtype)
                kv.mask = kv.mask * keep
            kv.lengths = depth.clone()
            segments = [rows[r][d:] for r, _, d in reps]
            hidden = lm._forward(kv, segments)
            counts.forward_calls += 1
            # Outputs of the requested nodes first computed in this round, through the LM head in one go.
            gather_row, gather_pos, keys = [], [], []
            for i, (r, _, d) in enumerate(reps):
                for L in row_nodes[r]:
                    if L > d:  # node rows[r][:L] = hidden at the position of token L-1
                        gather_row.append(i)
                        gather_pos.append(L - 1 - d)
                        keys.append(tuple(rows[r][:L]))
            if keys:
                h = hidden[torch.as_tensor(gather_row, device=lm.device), torch.as_tensor(gather_pos, device=lm.device)]
                lp = torch.log_softmax(lm._logits(h), dim=-1)
                for j, key in enumerate(keys):
                    if key in want_full:
                        out_full[key] = lp[j].cpu().numpy()
                    if key in want_tok:
                        toks = sorted(want_tok[key])
                        vals = lp[j, torch.as_tensor(toks, device=lm.device)].double().cpu().numpy()
                        out_tok[key] = dict(zip(toks, vals.tolist()))
            # The pool grows by the new rows; old rows get holes for the new physical positions.
            pool = _concat(pool, kv)
            pool_tokens = pool_tokens + [rows[r] for r, _, _ in reps]
            remaining = deferred

    if stats is not None and before is not None:
        counts.tokens_computed = stats.snapshot()["forward_tokens"] - before["forward_tokens"]
    label = None
    if conts is not None:
        label = np.zeros((len(prows), len(ctoks)), dtype=np.float64)
        for b, r in enumerate(prows):
            x = tuple(r)
            for k, c in enumerate(ctoks):
                label[b, k] = sum(out_tok[x + tuple(c[:j])][int(t)] for j, t in enumerate(c))
    nxt = np.stack([out_full[tuple(r)] for r in prows]).astype(np.float32) if full else None
    return FamilyScores(label, nxt, counts)


def _concat(a: Any, b: Any) -> Any:
    """Rows of ``a`` then rows of ``b`` in one KV batch; ``a`` (shorter) is padded with masked holes."""
    import torch
    from transformers import DynamicCache

    from app.llm.kv import KVBatch

    extra = b.physical_length - a.physical_length
    assert extra >= 0
    if a.physical_length == 0 and extra == 0:
        return KVBatch.empty(a.n + b.n, b.mask.device)
    data = []
    la = list(a.cache.layers) if a.physical_length else [None] * len(b.cache.layers)
    for lay_a, lay_b in zip(la, b.cache.layers):
        kb, vb = lay_b.keys, lay_b.values
        if lay_a is None:
            ka = kb.new_zeros((a.n,) + tuple(kb.shape[1:]))
            va = vb.new_zeros((a.n,) + tuple(vb.shape[1:]))
        else:
            ka, va = lay_a.keys, lay_a.values
            if ka.shape[0] != a.n:  # an expanded prefix view of batch 1
                ka, va = ka.expand(a.n, -1, -1, -1), va.expand(a.n, -1, -1, -1)
            if extra:
                pad = (0, 0, 0, extra)
                ka = torch.nn.functional.pad(ka, pad)
                va = torch.nn.functional.pad(va, pad)
        data.append((torch.cat([ka, kb], 0), torch.cat([va, vb], 0)))
    mask_a = torch.nn.functional.pad(a.mask, (0, extra)) if a.physical_length else a.mask.new_zeros((a.n, b.physical_length))
    return KVBatch(DynamicCache(ddp_cache_data=data), torch.cat([mask_a, b.mask], 0), torch.cat([a.lengths, b.lengths], 0))
