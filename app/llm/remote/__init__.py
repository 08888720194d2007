"""The remote backend (``backend="remote"``): a model behind an OpenAI-compatible server, first of all vLLM.

Configured like any other model (docs/vllm.md)::

    {"name": "smollm2-vllm", "kind": "lm", "backend": "remote",
     "source": "http://127.0.0.1:8001/v1",
     "options": {"served_model_name": "smollm2", "api_key_env": "VLLM_API_KEY"}}

``source`` (or ``options["base_url"]``) is the server's OpenAI base URL (ending
in ``/v1``); vLLM's own routes (``/tokenize``, ``/detokenize``) live beside it.

How each protocol call maps onto the server (all prompts travel as token ids,
tokenized with the server's ``/tokenize`` under the same BOS rule as the ``hf``
backend, so both backends score the very same tokens):

* ``next_token_logprobs``: ``/v1/completions`` with ``max_tokens=1``,
  ``logprobs=-1`` (the server runs with ``--max-logprobs -1``) and
  ``return_tokens_as_token_ids``: the whole vocabulary, keyed by token id.
* ``continuation_logprobs``: one-token continuations with ``logprob_token_ids``
  (all labels of one prompt in one request, at most 128 ids a request);
  longer ones with ``prompt_logprobs=0`` on prompt + continuation (teacher
  forced, one request per pair). Either route is exact; none is approximated.
* ``generate``: ``/v1/completions`` with explicit neutral sampling parameters
  (the server's generation config never leaks in) and ``return_token_ids``.
* ``start_decode``: a decode session that asks for the full next-token
  distribution of every live sequence at each step (no KV cache crosses HTTP;
  the server's prefix cache, salted per call, does that work). It hands out
  log-probabilities where the ``hf`` session hands out raw logits: they differ
  by one constant per row, which every mechanism here removes (max-shift or
  log-softmax).

Capabilities are probed once at load (``options["discover"]``, default on) and
may be declared in ``options["capabilities"]``; a call that needs a missing one
raises :class:`CapabilityError` naming it, never a silent approximation.

Batching: a protocol call fans out into concurrent requests on one private
event loop (httpx, at most ``max_concurrency`` in flight per model). Idempotent
requests are retried with exponential back-off and jitter on connection errors,
timeouts, 408/429/5xx; a request that could change what a caller sees (sampled
generation without a seed) is retried only when it never reached the server.

Prefix-cache isolation (vLLM's ``cache_salt``; CVE-2025-46570): every request
carries a salt. Inside :func:`cache_salt_scope` it is derived from the tenant
(HMAC with the ``cache_salt`` option, or a per-process random key), so one
tenant's requests share cache blocks and never another tenant's. Outside any
scope each protocol call gets a fresh random salt: nothing is shared across
calls at all.

Modules: ``transport`` (errors, cache salt, options, HTTP), ``capabilities``,
``lm`` (:class:`RemoteLanguageModel`), ``decode`` (:class:`RemoteDecodeSession`)
and ``embedder`` (:class:`RemoteEmbedder`); this package re-exports their names.
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict

from ..types import ModelSpec
from .capabilities import RemoteCapabilities
from .decode import RemoteDecodeSession
from .embedder import RemoteEmbedder
from .lm import RemoteLanguageModel
from .transport import (
    MAX_LOGPROB_TOKEN_IDS,
    RemoteError,
    RemoteOptions,
    RemoteTimeout,
    Transport,
    cache_salt_scope,
)

log = logging.getLogger(__name__)


def load_remote(spec: ModelSpec) -> RemoteLanguageModel | RemoteEmbedder:
    """Connect to the server named by ``spec`` and negotiate capabilities. Raises ModelLoadError."""
    opts = RemoteOptions.from_spec(spec)
    if spec.kind == "embedder":
        emb = RemoteEmbedder(spec, opts)
        try:
            return emb.connect()
        except BaseException:
            emb.close()
            raise
    lm = RemoteLanguageModel(spec, opts)
    try:
        lm.connect()
    except BaseException:
        lm.close()
        raise
    caps = lm.capabilities()
    log.info("%s: connected to %r; capabilities %s", spec.name, lm.model_id,
             json.dumps({k: v for k, v in asdict(caps).items() if isinstance(v, bool)}, sort_keys=True))
    return lm


__all__ = [
    "MAX_LOGPROB_TOKEN_IDS",
    "RemoteCapabilities",
    "RemoteDecodeSession",
    "RemoteEmbedder",
    "RemoteError",
    "RemoteLanguageModel",
    "RemoteOptions",
    "RemoteTimeout",
    "Transport",
    "cache_salt_scope",
    "load_remote",
]
