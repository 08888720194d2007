"""How a batch's rows are cut into forward passes and laid out as padded tensors, what the passes count,
and how the next token is chosen (hf.py helpers)."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch


@dataclass
class ForwardStats:
    """Counters for benchmarks and tests (reset with :meth:`reset`).

    ``forward_tokens``: real tokens run through the model (prefix work included);
    ``padded_tokens``: positions run, padding included; ``reused_tokens``:
    row-tokens served from a shared or cached prefix instead of being
    recomputed; ``forward_calls``: model forward passes.
    """

    forward_tokens: int = 0
    padded_tokens: int = 0
    reused_tokens: int = 0
    forward_calls: int = 0
    forward_rows: int = 0  # rows (batch entries) over all forward passes
    prefix_cache_hits: int = 0
    merged_steps: int = 0  # forward passes that carried the decode steps of several sessions

    def reset(self) -> None:
        self.forward_tokens = self.padded_tokens = self.reused_tokens = 0
        self.forward_calls = self.forward_rows = self.prefix_cache_hits = self.merged_steps = 0

    def snapshot(self) -> dict[str, int]:
        return dict(self.__dict__)


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


def _flat(rows: Sequence[Sequence[int]], count: int) -> np.ndarray:
    return np.fromiter(itertools.chain.from_iterable(rows), dtype=np.int64, count=count)


def right_padded(rows: Sequence[Sequence[int]], s: int, pad_id: int, positions: Sequence[Sequence[int]] | None,
                 segs: Sequence[Sequence[int]] | None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None,
                                                                 torch.Tensor | None]:
    """ids, new-token mask (n, s) and, when given, position ids and segments, right padded: built in
    numpy, a handful of torch calls per batch whatever its rows (a per-row torch fill made batch assembly
    cost O(rows) dispatches on the model thread, each of which may wait for the GIL under load)."""
    n = len(rows)
    lens = np.fromiter((len(r) for r in rows), dtype=np.int64, count=n)
    real = np.arange(s)[None, :] < lens[:, None]  # row-major: the flattened rows fill it in order
    total = int(lens.sum())
    ids = np.full((n, s), pad_id, dtype=np.int64)
    ids[real] = _flat(rows, total)
    pos = seg = None
    if positions is not None:
        pos = np.zeros((n, s), dtype=np.int64)
        pos[real] = _flat(positions, total)
    if segs is not None:
        seg = np.full((n, s), -1, dtype=np.int64)
        seg[real] = _flat(segs, total)
    return (torch.from_numpy(ids), torch.from_numpy(real.astype(np.int64)),
            None if pos is None else torch.from_numpy(pos), None if seg is None else torch.from_numpy(seg))


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
