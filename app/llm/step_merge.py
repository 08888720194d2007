"""Decode steps of concurrent sessions merged into one forward pass: the ``hf`` backend's step runner.

The model's :class:`~app.llm.scheduler.BatchScheduler` hands the decode steps it queued to
:func:`run_steps`; :func:`step_groups` decides which of them to merge (the cost rule,
docs/models.md#decode-batching) and :func:`merged_step` runs a group as one pass over the
members' caches left padded to the longest (kv.py). As in passes.py the model is passed in
(``lm``, an :class:`~app.llm.hf.HFLanguageModel`); this module does not import hf.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import torch
from transformers import DynamicCache

from .kv import KVBatch, cache_layers

log = logging.getLogger(__name__)

MERGE_MAX_TOKENS = 32768  # KV row-tokens of one merged decode step (~1.5 GB for a 135M model in float32)


def step_groups(lm: Any, kvs: Sequence[KVBatch]) -> list[list[int]]:
    """Which queued decode steps to merge: groups of indices into ``kvs`` (a group of one steps alone).

    A merged step of k sessions saves k - 1 forward passes (on a CPU, k - 1 reads of the
    weights) but copies every member's cache into a left-padded batch and attends over the
    longest member's length. Members are taken shortest first while the group's rows x padded
    length stays within ``lm.merge_step_tokens`` x (members - 1), padding at most doubles the
    cached tokens, and the group stays within ``MERGE_MAX_TOKENS`` (memory). Measured:
    docs/models.md#decode-batching (2 sessions of 8 rows x 400 tokens: 0.85x, not merged;
    8 sessions of 4 x 200: 2.0x, merged).
    """
    order = sorted(range(len(kvs)), key=lambda i: kvs[i].physical_length)
    if lm.merge_step_tokens == 0 or len(kvs) < 2:
        return [[i] for i in order]
    groups: list[list[int]] = []
    cur: list[int] = []
    rows = real = 0
    for i in order:  # ascending: physical_length + 1 of kvs[i] is the padded length if it joins
        kv = kvs[i]
        t = kv.physical_length + 1
        n_rows, n_real = rows + kv.n, real + kv.n * t
        padded = n_rows * t
        fits = padded <= lm.merge_step_tokens * len(cur) and padded <= 2 * n_real and padded <= MERGE_MAX_TOKENS
        if lm._window is not None and t > lm._window:
            fits = False  # padded batches longer than the window are not supported (HFLanguageModel._forward)
        if cur and fits:
            cur.append(i)
            rows, real = n_rows, n_real
            continue
        if cur:
            groups.append(cur)
        cur, rows, real = [i], kv.n, kv.n * t
    groups.append(cur)
    return groups


def run_steps(lm: Any, items: list[tuple[Any, list[int]]]) -> list[Any]:
    """The scheduler's step runner: decode steps ``(kv, tokens)`` of concurrent sessions; one
    result per step, its (n, V) logits or the exception that step raised."""
    kvs: list[KVBatch] = [kv for kv, _ in items]
    results: list[Any] = [None] * len(items)
    with lm._lock:
        for group in step_groups(lm, kvs):
            if len(group) > 1:
                try:
                    outs = merged_step(lm, [kvs[i] for i in group], [items[i][1] for i in group])
                except Exception:  # nothing was written back: step each alone, each with its own error
                    log.exception("merged decode step failed; stepping its sessions one by one")
                else:
                    for i, o in zip(group, outs):
                        results[i] = o
                    continue
            for i in group:
                try:
                    results[i] = lm._step_alone(kvs[i], items[i][1])
                except Exception as exc:  # noqa: BLE001 - handed to that step's caller
                    results[i] = exc
    return results


def merged_step(lm: Any, kvs: Sequence[KVBatch], tokens: Sequence[Sequence[int]]) -> list[torch.Tensor]:
    """One forward pass for the next token of several sessions' rows: each cache is left padded
    to the longest (masked holes, exact position ids: kv.py), and afterwards each session keeps
    its own rows without the padding (views of the merged cache). Call under ``lm._lock``."""
    width = max(kv.physical_length for kv in kvs)
    n_total = sum(kv.n for kv in kvs)
    members = [cache_layers(kv.cache) for kv in kvs]
    data = []
    for li in range(len(members[0])):
        ref_k, ref_v = members[0][li]
        keys = ref_k.new_zeros((n_total, ref_k.shape[1], width, ref_k.shape[3]))
        values = ref_v.new_zeros((n_total, ref_v.shape[1], width, ref_v.shape[3]))
        r = 0
        for kv, layers in zip(kvs, members):
            off = width - kv.physical_length
            keys[r:r + kv.n, :, off:] = layers[li][0]
            values[r:r + kv.n, :, off:] = layers[li][1]
            r += kv.n
        data.append((keys, values))
    mask = torch.zeros((n_total, width), dtype=torch.long, device=lm.device)
    r = 0
    for kv in kvs:
        mask[r:r + kv.n, width - kv.physical_length:] = kv.mask
        r += kv.n
    merged = KVBatch(DynamicCache(ddp_cache_data=data), mask, torch.cat([kv.lengths for kv in kvs]))
    hidden = lm._forward(merged, [[int(t)] for toks in tokens for t in toks])
    assert hidden is not None
    logits: torch.Tensor = lm._logits(hidden[:, 0])
    merged_layers = cache_layers(merged.cache)
    outs = []
    r = 0
    for kv in kvs:
        off = width - kv.physical_length
        kv.cache = DynamicCache(ddp_cache_data=[(k[r:r + kv.n, :, off:], v[r:r + kv.n, :, off:])
                                                for k, v in merged_layers])
        kv.mask = merged.mask[r:r + kv.n, off:]
        kv.lengths = merged.lengths[r:r + kv.n]
        outs.append(logits[r:r + kv.n])
        r += kv.n
    lm.stats.merged_steps += 1
    return outs
