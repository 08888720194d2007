"""The in-process Hugging Face backend (``backend="hf"``): CUDA when present, else CPU.

Conventions (see docs/models.md):

* **Tokenization / BOS.** A prompt is tokenized without the tokenizer's
  special tokens; then, if this tokenizer normally prepends a BOS token and
  the text does not already start with one (chat templates such as Gemma's
  write ``<bos>`` themselves), one BOS is prepended. So a BOS is never doubled
  and never missing. SmolLM2 uses no BOS. EOS is never appended.
* **Continuations** are tokenized on their own (no special tokens) and
  appended to the prompt's tokens: a label " Technology" is scored as the
  tokens ``tokenize(" Technology")``, i.e. what the model emits after a
  prompt ending in "Answer:". Prompts should not end in a space when labels
  carry the leading space. The score is the exact teacher-forced sum
  ``sum_j log p(c_j | prompt, c_<j)``; an empty continuation scores 0.
  ``relative_continuation_logprobs``: the same up to a constant per prompt (single-token labels: their
  rows of the LM head only, passes.py), for callers that renormalise over the labels.
* **Batching and padding.** A batch's longest common token prefix is computed
  once (or taken from the LRU of prefix caches) and shared; suffixes are right
  padded after it, with explicit position ids and masks (see ``kv.py``), so
  batched numbers equal one-at-a-time numbers up to float rounding.
* **Threads.** One re-entrant lock per model serialises forward passes.
  Scoring calls and :class:`DecodeSession` steps from concurrent threads go
  through the model's :class:`~app.llm.scheduler.BatchScheduler`
  (``options["scheduler"]``), which coalesces scoring calls into batched calls
  of the same code and concurrent sessions' steps into merged steps when the
  cost rule says it pays (``step_merge.step_groups``); one tenant per batch.
* **Tenants.** The prefix LRU is keyed by the current tenant
  (:func:`app.llm.tenancy.tenant_scope`): a tenant's calls reuse its own prefixes only.
"""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import Hashable, Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import torch

from . import passes, step_merge
from .budget import cpu_pass_cost_tokens, device_token_budgets
from .chunking import ForwardStats, plan_chunks, right_padded
from .cuda_graphs import GraphForward, GraphOptions
from .decode import DecodeSession, generate_from
from .encode import encode_plain_many
from .segments import DEFAULT_PIECES, SegmentEncoder, separable
from .errors import CapabilityError
from .kv import KVBatch, PrefixCache, PrefixKV, batch_common_prefix
from .scheduler import BatchScheduler, SchedulerOptions
from .tenancy import current_tenant, spend_work
from .hf_embed import HFEmbedder
from .types import Capabilities, Generation, ModelSpec, check_generation_args, check_prompt_rows, stop_strings

MERGE_JOB_PASSES = 32  # a CPU scoring job of more prompt tokens than this many passes' cost runs alone


class HFLanguageModel:
    """A causal LM from transformers behind the :class:`~app.llm.types.LanguageModel` protocol."""

    backend = "hf"

    def __init__(self, spec: ModelSpec, model: Any, tokenizer: Any, *, device: torch.device | str, dtype: torch.dtype):
        self.name = spec.name
        self.spec = spec
        self.model = model
        self.tokenizer = tokenizer
        self.device = torch.device(device)
        self.dtype = dtype
        opts = dict(spec.options or {})
        self.prefix_reuse: bool = bool(opts.get("prefix_reuse", True))
        self.min_prefix_tokens: int = max(1, int(opts.get("min_prefix_tokens", 8)))
        # A batch's common prefix not yet cached costs a forward pass of its own. On a CPU a pass
        # costs its tokens, so computing the prefix once saves time; on a GPU a 135M-class model is
        # launch-bound and the extra pass is what makes T partition prompts 1.5x one prompt
        # (docs/mechanisms.md#latency, H100: 1.43-1.50x with it, 0.90-0.97x without). "auto":
        # compute it on CPU, only reuse what the LRU already holds on CUDA.
        self.shared_prefix_pass: str = str(opts.get("shared_prefix_pass", "auto"))
        if self.shared_prefix_pass not in ("auto", "always", "cached"):
            raise ValueError("options.shared_prefix_pass must be auto, always or cached")
        # Token budgets per pass: measured constants on a CPU, from free memory on CUDA (budget.py).
        budgets = device_token_budgets(self.device, model.config, dtype)
        self.max_batch_tokens: int = max(1, int(opts.get("max_batch_tokens", budgets.model)))
        # What a forward pass costs beyond its tokens, in tokens: rows of a batch are split into
        # chunks of similar length when the padding saved is worth the extra passes (plan_chunks).
        # CPU: derived from the weights (budget.cpu_pass_cost_tokens: 16 for SmolLM2-135M, whose pass of one
        # token costs ~48 ms and each further token ~3 ms on 1 thread; ~550 for the 2-layer benchmark model,
        # whose pass is its LM head's weight read and Python dispatch). On a GPU a pass is launch-bound and
        # padding nearly free: 0 keeps the fewest passes.
        if "pass_cost_tokens" in opts:
            pass_cost = int(opts["pass_cost_tokens"])
        else:
            pass_cost = cpu_pass_cost_tokens(model) if self.device.type == "cpu" else 0
        self.pass_cost_tokens: int = max(0, pass_cost)
        self.prefix_cache = PrefixCache(int(opts.get("prefix_cache_tokens", 2048)))
        # Prompts tokenized from remembered pieces (exemplars, instruction) where that is exact for this
        # tokenizer (segments.py); None: whole texts, as before. Option token_cache: false turns it off.
        self.segments: SegmentEncoder | None = None
        if bool(opts.get("token_cache", True)) and separable(getattr(tokenizer, "_tokenizer", None)):
            self.segments = SegmentEncoder(lambda texts: encode_plain_many(self.tokenizer, texts),
                                           int(opts.get("token_cache_pieces", DEFAULT_PIECES)))
        # Continuations of one token each (single-token labels) scored from one next-token pass per
        # prompt instead of a second pass over every (prompt, label) pair (passes.py). The same quantity;
        # float32 rounding differs from the two-stage path by up to ~2e-5, as much as the two-stage path
        # differs from itself between batch shapes (tests/llm/test_continuation.py). Default since issue 27.
        self.single_token_fast_path: bool = bool(opts.get("single_token_fast_path", True))
        # Multi-token continuations in one pass with a prefix-sharing mask (passes.py); False: two stages.
        self.one_pass_scoring: bool = bool(opts.get("one_pass_scoring", True))
        self.stats = ForwardStats()
        self._lock = threading.RLock()
        sched_opts = SchedulerOptions.from_options(opts)
        if sched_opts.merge_job_tokens is None:
            # The scheduler's cost rule (BatchScheduler._merges): on a CPU a scoring job of more than 32
            # passes' worth of prompt tokens is compute-bound and gains under ~3% from sharing a batch
            # (512 tokens for SmolLM2-135M, whose pass costs 16; ~17k for the 2-layer benchmark model, so
            # its concurrent answers merge); on a GPU a forward pass is launch-bound and merging large
            # jobs is where batching pays, so no limit there.
            sched_opts = replace(sched_opts, merge_job_tokens=(
                MERGE_JOB_PASSES * self.pass_cost_tokens if self.device.type == "cpu" else 0))
        if sched_opts.max_batch_tokens is None:
            sched_opts = replace(sched_opts, max_batch_tokens=budgets.scheduler)
        self.scheduler = BatchScheduler(spec.name, self._run_batch, sched_opts, model_stats=self.stats.snapshot,
                                        run_steps=functools.partial(step_merge.run_steps, self))
        # Decode steps of concurrent sessions are merged into one forward pass when that pays (see
        # step_merge.step_groups and docs/models.md#decode-batching): a merged step may copy this many
        # row-tokens of KV cache (rows x padded length) per forward pass it saves; 0 turns merging off.
        self.merge_step_tokens: int = max(0, int(opts.get("merge_step_tokens", budgets.merge_step)))
        self._tok_lock = threading.Lock()

        cfg = model.config.get_text_config()
        self._base = model.base_model  # the decoder stack without the LM head
        self._lm_head = model.get_output_embeddings()
        self._softcap = getattr(cfg, "final_logit_softcapping", None)
        self._vocab_size = int(self._lm_head.weight.shape[0])
        self._max_context = getattr(cfg, "max_position_embeddings", None)
        layer_types = getattr(cfg, "layer_types", None) or []
        self._window = getattr(cfg, "sliding_window", None) if "sliding_attention" in layer_types else None
        self._attn_impl = str(getattr(cfg, "_attn_implementation", None) or "sdpa")

        self._pad_id = next(
            (i for i in (tokenizer.pad_token_id, tokenizer.eos_token_id, 0) if i is not None), 0
        )
        with_special = tokenizer("x", add_special_tokens=True)["input_ids"]
        bos = tokenizer.bos_token_id
        self._bos_id = bos if (bos is not None and with_special and with_special[0] == bos) else None
        eos: set[int] = set()
        gc_eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
        for e in (list(gc_eos) if isinstance(gc_eos, (list, tuple)) else [gc_eos]) + [tokenizer.eos_token_id]:
            if e is not None:
                eos.add(int(e))
        self.eos_token_ids = frozenset(eos)
        # Scoring passes replayed from CUDA graphs over bucketed shapes (cuda_graphs.py); None: eager.
        graph_opts = GraphOptions.from_options(opts)
        self.graphs: GraphForward | None = None
        if graph_opts.strategy(self.device) != "off" and self._window is None:
            self.graphs = GraphForward(self._base, self.device, self._pad_id, graph_opts,
                                       attn_impl=self._attn_impl, dtype=dtype)
            self.graphs.warm()

    # ------------------------------------------------------------------ info

    def capabilities(self) -> Capabilities:
        return Capabilities(
            backend=self.backend,
            full_vocab_logprobs=True,
            continuation_scoring=True,
            generation=True,
            chat_template=bool(getattr(self.tokenizer, "chat_template", None)),
            embeddings=False,
            max_context=self._max_context,
            vocab_size=self._vocab_size,
            embedding_dim=None,
            device=str(self.device),
            dtype=str(self.dtype).removeprefix("torch."),
            prefix_reuse=self.prefix_reuse,
            decode_session=True,
        )

    @property
    def vocab_size(self) -> int:
        return self._vocab_size

    # ------------------------------------------------------------ tokenizing

    def _encode_plain(self, text: str) -> list[int]:
        with self._tok_lock:
            return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def _encode_many(self, texts: Sequence[str]) -> list[list[int]]:
        """Plain token ids of several texts in one batched tokenizer call (one lock, one Rust call)."""
        if not texts:
            return []
        with self._tok_lock:
            if self.segments is not None:
                return self.segments.encode_many(texts, current_tenant())
            return encode_plain_many(self.tokenizer, texts)

    def _with_bos(self, ids: list[int]) -> list[int]:
        if self._bos_id is not None and (not ids or ids[0] != self._bos_id):
            ids = [self._bos_id] + ids
        return ids

    def tokenize(self, text: str) -> list[int]:
        """Token ids of a prompt, exactly as the scoring and generation calls see it (BOS rule above)."""
        return self._with_bos(self._encode_plain(text))

    def detokenize(self, token_ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        with self._tok_lock:
            return self.tokenizer.decode(list(token_ids), skip_special_tokens=skip_special_tokens)

    def apply_chat_template(self, messages: list[dict[str, Any]], add_generation_prompt: bool = True) -> str:
        if not getattr(self.tokenizer, "chat_template", None):
            raise CapabilityError(f"model {self.name!r} has no chat template (not an instruction-tuned model?)")
        with self._tok_lock:
            return self.tokenizer.apply_chat_template(
                messages, tokenize=False, add_generation_prompt=add_generation_prompt
            )

    def _encode_prompts(self, prompts: Sequence[str], extra: int = 0,
                        encoded: list[list[int]] | None = None) -> list[list[int]]:
        """Token rows of prompts (one batched tokenizer call; ``encoded``: their plain ids, already
        computed by the caller's batched call), checked against the context."""
        if isinstance(prompts, str):
            raise TypeError("prompts must be a sequence of strings, not one string")
        rows = [self._with_bos(r) for r in (encoded if encoded is not None else self._encode_many(prompts))]
        return check_prompt_rows(rows, extra, self._max_context, f"model {self.name!r}")

    # ---------------------------------------------------------- forward core

    def _forward(self, kv: KVBatch, rows: Sequence[Sequence[int]], *, positions: Sequence[Sequence[int]] | None = None,
                 segs: Sequence[Sequence[int]] | None = None, keep_cache: bool = True) -> torch.Tensor | None:
        """Append ``rows[i]`` to row ``i`` of ``kv`` (right padded); return the last hidden states (n, S, H).

        ``positions``/``segs`` (per token: position id; segment, passes.segment_mask): a custom
        prefix-sharing mask instead of the causal one. ``keep_cache=False``: the caller reads only the
        hidden states, so an empty ``kv`` may run as one captured CUDA graph (cuda_graphs.py).
        """
        n = kv.n
        assert len(rows) == n
        lens = [len(r) for r in rows]
        s = max(lens, default=0)
        if s == 0:
            return None
        real = sum(lens)  # the counts come from the host's row lengths: no tensor reductions, no device syncs
        ids, new, pos, seg = right_padded(rows, s, self._pad_id, positions, segs)
        if not keep_cache and kv.physical_length == 0 and self.graphs is not None:
            seg_t = seg if seg is not None else torch.where(new > 0, 0, -1)
            pos_t = pos if pos is not None else torch.arange(s).expand(n, s)
            hidden = self.graphs.run(ids, pos_t, seg_t)  # host tensors: padded there, copied once
            if hidden is not None:
                self.stats.forward_calls += 1
                self.stats.forward_rows += n  # rows/pass read 0 on a GPU before (issue 27 serving tables)
                self.stats.forward_tokens += real
                self.stats.padded_tokens += self.graphs.last_padded_tokens
                return hidden
        ids, new = ids.to(self.device), new.to(self.device)
        new_len = new.sum(1)
        # Only a row that adds no token can be left with none (a cached length is >= 0).
        if min(lens) == 0 and bool(((kv.lengths + new_len) == 0).any()):
            raise RuntimeError("internal: a row with no real token would be fully masked (NaN)")
        if self._window is not None and kv.physical_length + s > self._window and not bool(kv.mask.all() and new.all()):
            raise CapabilityError(
                f"model {self.name!r} uses sliding-window attention ({self._window} tokens); padded batches longer "
                f"than the window are not supported: send shorter prompts or one prompt per call"
            )
        position_ids = (kv.lengths[:, None] + torch.arange(s, device=self.device)[None, :] if pos is None
                        else pos.to(self.device))
        attention_mask = torch.cat([kv.mask, new], dim=1)
        mask_in: torch.Tensor = attention_mask
        if seg is not None:
            mask_in = passes.attention_mask_4d(kv.mask, seg.to(self.device), self._attn_impl, self.dtype)
        with torch.inference_mode():
            out = self._base(
                input_ids=ids,
                attention_mask=mask_in,
                position_ids=position_ids,
                past_key_values=kv.cache,
                use_cache=True,
            )
        kv.mask = attention_mask
        kv.lengths = kv.lengths + new_len
        self.stats.forward_calls += 1
        self.stats.forward_rows += n
        self.stats.forward_tokens += real
        self.stats.padded_tokens += n * s
        return out.last_hidden_state

    def _logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Full-vocabulary logits in float32 (float64 for a float64 model) for hidden states (..., H)."""
        with torch.inference_mode():
            return passes.finish_logits(self._lm_head(hidden), self._softcap)

    def _prefix_kv(self, tokens: Sequence[int]) -> PrefixKV | None:
        """Keys/values for ``tokens`` (batch 1), from the LRU where possible. Call under ``_lock``."""
        if not self.prefix_reuse or len(tokens) < self.min_prefix_tokens:
            return None
        tokens = tuple(tokens)
        entry, m = self.prefix_cache.best_match(tokens, current_tenant())
        base = None
        if entry is not None and m >= self.min_prefix_tokens:
            base = entry.truncate(m)
            self.stats.prefix_cache_hits += 1
            if m == len(tokens):
                return base
        else:
            m = 0
        kv = KVBatch.from_prefix(base, 1, self.device)
        self._forward(kv, [tokens[m:]])
        result = kv.to_prefix(tokens)
        self.prefix_cache.put(result, current_tenant())
        return result

    def _shared_prefix(self, rows: Sequence[Sequence[int]], cap: int) -> PrefixKV | None:
        """The longest common prefix of ``rows`` (at most ``cap`` tokens) as keys/values, or None.

        For several rows the common prefix is computed once (or taken from the
        LRU); with ``shared_prefix_pass`` "cached" (the "auto" choice on CUDA) only
        what the LRU holds is used. A single row has nothing to share within the
        call: only what the LRU already holds is used, and the caller stores the
        row afterwards (:meth:`_remember`), which saves a separate prefix forward pass.
        """
        if not self.prefix_reuse:
            return None
        common = batch_common_prefix(rows)[: max(0, cap)]
        if len(rows) > 1 and self._compute_shared_prefix():
            return self._prefix_kv(common)
        if len(common) < self.min_prefix_tokens:
            return None
        entry, m = self.prefix_cache.best_match(common, current_tenant())
        if entry is None or m < self.min_prefix_tokens:
            return None
        self.stats.prefix_cache_hits += 1
        return entry.truncate(m)

    def _compute_shared_prefix(self) -> bool:
        mode = self.shared_prefix_pass
        return mode == "always" or (mode == "auto" and self.device.type != "cuda")

    def _remember(self, kv: KVBatch, tokens: Sequence[int]) -> None:
        """Store a single unpadded row's keys/values in the LRU (after a one-row call)."""
        if self.prefix_reuse and kv.n == 1 and len(tokens) >= self.min_prefix_tokens and bool(kv.mask.all()):
            self.prefix_cache.put(kv.to_prefix(tokens), current_tenant())

    def _chunks(self, lengths: Sequence[int], fixed: int, rows_per_item: int = 1, passes: int = 1) -> list[list[int]]:
        """Group item indices (sorted by length) so that rows x (fixed + max length) fits max_batch_tokens,
        at the least cost of padding plus passes (:func:`plan_chunks`)."""
        return plan_chunks(lengths, fixed, rows_per_item=rows_per_item, max_tokens=self.max_batch_tokens,
                           chunk_cost=passes * self.pass_cost_tokens)

    # ------------------------------------------------------------- scoring

    def next_token_logprobs(self, prompts: Sequence[str]) -> np.ndarray:
        """(B, V) float32: log p(next token | prompt_b) over the full vocabulary."""
        return self.scheduler.submit(("next",), self._encode_prompts(prompts))

    def _run_batch(self, key: Hashable, rows: list[list[int]]) -> np.ndarray:
        """The scheduler's batch: rows of one or more calls of the same kind (``key``), in one batched call."""
        assert isinstance(key, tuple)
        if key[0] == "next":
            return self._next_token_rows(rows)
        if key[0] == "label":  # single-token labels: their LM head rows only (passes.py, "Label rows")
            return passes.next_token_rows(self, rows, [c[0] for c in key[1]], relative=True)
        return self._continuation_rows(rows, [list(c) for c in key[1]])

    def _next_token_rows(self, rows: Sequence[Sequence[int]], token_ids: Sequence[int] | None = None) -> np.ndarray:
        """log p(next token | row) for token rows: (B, V) float32, or (B, len(token_ids)) float64 for those tokens."""
        return passes.next_token_rows(self, rows, token_ids)

    def continuation_logprobs(self, prompts: Sequence[str], continuations: Sequence[str]) -> np.ndarray:
        """(B, K) float64: ``sum_j log p(c_kj | prompt_b, c_k<j)``, teacher forced, exact.

        When every continuation is one token (single-token labels) this is ``log p(c_k | prompt_b)``;
        with ``single_token_fast_path`` one next-token pass per prompt then gives all K.
        """
        return self._submit_continuations(prompts, continuations, relative=False)

    def relative_continuation_logprobs(self, prompts: Sequence[str], continuations: Sequence[str]) -> np.ndarray:
        """(B, K) float64: :meth:`continuation_logprobs` up to an additive constant per prompt, for callers
        that renormalise over the K (``app.icl.score_labels``). Single-token continuations on the fast path:
        their logits, from K rows of the LM head (passes.py, "Label rows"); others: continuation_logprobs."""
        return self._submit_continuations(prompts, continuations, relative=True)

    def _submit_continuations(self, prompts: Sequence[str], continuations: Sequence[str], *,
                              relative: bool) -> np.ndarray:
        if isinstance(continuations, str):
            raise TypeError("continuations must be a sequence of strings, not one string")
        if isinstance(prompts, str):
            raise TypeError("prompts must be a sequence of strings, not one string")
        k_count = len(continuations)
        both = self._encode_many([*continuations, *prompts])  # one tokenizer call per answer
        conts = both[:k_count]
        longest_cont = max((len(c) for c in conts), default=0)
        prows = self._encode_prompts(prompts, extra=longest_cont, encoded=both[k_count:])
        if len(prows) == 0 or k_count == 0 or longest_cont == 0:
            return np.zeros((len(prows), k_count), dtype=np.float64)
        single = self.single_token_fast_path and all(len(c) == 1 for c in conts)
        return self.scheduler.submit(("label" if relative and single else "cont", tuple(tuple(c) for c in conts)),
                                     prows)

    def _continuation_rows(self, prows: list[list[int]], conts: list[list[int]]) -> np.ndarray:
        """(B, K) float64 continuation scores for prompt token rows (see :meth:`continuation_logprobs`):
        single-token labels from one next-token pass, others in one pass or two stages (passes.py)."""
        if self.single_token_fast_path and all(len(c) == 1 for c in conts):
            return self._next_token_rows(prows, [c[0] for c in conts])  # (B, K) float64 already
        if self.one_pass_scoring and self._window is None:  # a custom mask would bypass a sliding window
            return passes.continuation_one_pass(self, prows, conts)
        return passes.continuation_two_stage(self, prows, conts)

    # ------------------------------------------------------------ decoding

    def start_decode(self, prompts: Sequence[str] | Sequence[Sequence[int]], *,
                     reuse_prefix: bool = True) -> DecodeSession:
        """Open a :class:`DecodeSession` over ``prompts`` (strings, or token id lists used as is).
        ``reuse_prefix=False``: neither read nor fill the cross-call prefix LRU, so the logits are a
        function of these prompts alone, not of what earlier calls left in the cache (float32 differs
        by ~1e-6 between a reused and a recomputed prefix); private decoding's public row uses it."""
        if prompts and not isinstance(prompts[0], str):
            rows = [list(map(int, r)) for r in prompts]
            if any(len(r) == 0 for r in rows):
                raise CapabilityError("every token id prompt needs at least one token")
        else:
            rows = self._encode_prompts(prompts)  # type: ignore[arg-type]
        if not rows:
            raise CapabilityError("start_decode needs at least one prompt")
        spend_work(sum(len(r) for r in rows), f"decoding {len(rows)} prompts")
        self.scheduler.admit()  # decoding does not queue, but a full queue refuses new work of any kind
        with self._lock:
            prefix = self._shared_prefix(rows, cap=min(len(r) for r in rows) - 1) if reuse_prefix else None
            p = len(prefix) if prefix is not None else 0
            kv = KVBatch.from_prefix(prefix, len(rows), self.device)
            suffixes = [r[p:] for r in rows]
            hidden = self._forward(kv, suffixes)
            assert hidden is not None  # every prompt has a token
            last = torch.as_tensor([len(sfx) - 1 for sfx in suffixes], device=self.device)
            logits = self._logits(hidden[torch.arange(len(rows), device=self.device), last])
            self.stats.reused_tokens += p * len(rows)
            if len(rows) == 1 and reuse_prefix:
                self._remember(kv, rows[0])
        # A session that reads no cached prefix (private decoding's public row) also steps alone: its
        # numbers are then a function of its own rows, never of a merged batch's shape.
        return DecodeSession(self, kv, logits, rows, tenant=current_tenant(), shared_steps=reuse_prefix)

    def _decode_step(self, kv: KVBatch, tokens: Sequence[int], *, shared: bool = True) -> torch.Tensor:
        spend_work(len(tokens), "a decode step")
        if self._max_context is not None and int(kv.lengths.max()) + 1 > self._max_context:
            raise CapabilityError(f"decoding past the max context {self._max_context} of model {self.name!r}")
        # A thread that already holds the model lock (an audit driving the model directly) steps
        # itself: queueing would wait on a worker that waits on this thread's lock.
        owned = getattr(self._lock, "_is_owned", lambda: False)()
        if shared and self.scheduler.opts.enabled and not owned:
            out: torch.Tensor = self.scheduler.submit_step(kv, tokens)
            return out
        return self._step_alone(kv, tokens)

    def _step_alone(self, kv: KVBatch, tokens: Sequence[int]) -> torch.Tensor:
        with self._lock:
            hidden = self._forward(kv, [[int(t)] for t in tokens])
            assert hidden is not None
            return self._logits(hidden[:, 0])

    def generate(self, prompts: Sequence[str], *, max_new_tokens: int = 64, temperature: float = 0.0,
                 top_p: float = 1.0, stop: Sequence[str] | None = None, seed: int | None = None) -> list[Generation]:
        """Greedy (``temperature == 0``) or sampled (temperature, nucleus ``top_p``) generation.

        Sampling uses one ``torch.Generator`` per call, seeded by ``seed`` (or
        by ``os.urandom``), drawing rows in order on the CPU: the same call with
        the same seed repeats exactly.
        """
        check_generation_args(max_new_tokens, temperature, top_p)
        stops = stop_strings(stop)
        if isinstance(prompts, str):
            raise TypeError("prompts must be a sequence of strings, not one string")
        if not prompts:
            return []
        if max_new_tokens == 0:
            self._encode_prompts(prompts)
            return [Generation("", [], "length") for _ in prompts]
        generator = torch.Generator(device="cpu")
        generator.manual_seed(seed if seed is not None else int.from_bytes(os.urandom(8), "little") >> 1)
        return generate_from(self.start_decode(prompts), self.detokenize, self.eos_token_ids,
                             max_new_tokens=max_new_tokens, temperature=temperature, top_p=top_p, stops=stops,
                             generator=generator, max_context=self._max_context)

    # ------------------------------------------------------------- utility

    def clear_prefix_cache(self) -> None:
        self.prefix_cache.clear()

    def close(self) -> None:
        self.scheduler.close()

    def __repr__(self) -> str:
        return f"HFLanguageModel(name={self.name!r}, device={self.device}, dtype={self.dtype})"


__all__ = ["ForwardStats", "HFEmbedder", "HFLanguageModel", "plan_chunks"]
