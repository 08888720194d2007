"""How a batch's rows are cut into forward passes, and how the next token is chosen (hf.py helpers)."""

from __future__ import annotations

from collections.abc import Sequence

import torch


def plan_chunks(lengths: Sequence[int], fixed: int, *, rows_per_item: int, max_tokens: int,
                chunk_cost: int) -> list[list[int]]:
    """Item indices grouped into forward-pass chunks, each a run of the items sorted by length.

    Every chunk of more than one item keeps ``items x rows_per_item x (fixed + its longest length)``
    within ``max_tokens``. With ``chunk_cost`` 0 the chunks are filled greedily (fewest passes). With a
    positive ``chunk_cost`` (what one more chunk costs, in tokens) the split minimises the tokens
    computed, padding included (items x the chunk's longest length), plus ``chunk_cost`` per chunk:
    a batch of rows of very different lengths runs as a few passes of similar lengths instead of one
    pass padded to the longest row (exact dynamic programme over the sorted lengths).
    """
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    if not order:
        return []
    ls = [int(lengths[i]) for i in order]

    def fits(m: int, longest: int) -> bool:
        return m == 1 or m * rows_per_item * (fixed + longest) <= max_tokens

    if chunk_cost <= 0:
        chunks: list[list[int]] = []
        cur: list[int] = []
        for i, n in zip(order, ls):  # ascending, so n is the longest in the chunk so far
            if cur and not fits(len(cur) + 1, n):
                chunks.append(cur)
                cur = []
            cur.append(i)
        if cur:
            chunks.append(cur)
        return chunks
    inf = float("inf")
    best = [0.0] + [inf] * len(ls)  # best[j]: least cost of the first j sorted items
    cut = [0] * (len(ls) + 1)
    for j in range(1, len(ls) + 1):
        longest = ls[j - 1]
        for i in range(j - 1, -1, -1):  # the last chunk holds sorted items i .. j-1
            if not fits(j - i, longest):
                break
            cost = best[i] + chunk_cost + (j - i) * longest
            if cost <= best[j]:  # ties: the larger last chunk (fewer passes)
                best[j], cut[j] = cost, i
    out: list[list[int]] = []
    j = len(ls)
    while j > 0:
        out.append(order[cut[j]:j])
        j = cut[j]
    return out[::-1]



def choose_tokens(logits: torch.Tensor, temperature: float, top_p: float, generator: torch.Generator) -> list[int]:
    if temperature == 0.0:
        return logits.argmax(dim=-1).tolist()
    probs = torch.softmax(logits.float().cpu() / temperature, dim=-1)
    if top_p < 1.0:
        sorted_p, idx = probs.sort(dim=-1, descending=True)
        drop = (sorted_p.cumsum(dim=-1) - sorted_p) >= top_p  # keep the smallest set reaching top_p
        sorted_p = sorted_p.masked_fill(drop, 0.0)
        probs = torch.zeros_like(probs).scatter(-1, idx, sorted_p)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1).tolist()
