"""Remote backend: what was negotiated with the server, and how to get a missing capability."""

from __future__ import annotations

from dataclasses import dataclass, field


from ..types import Capabilities

# ------------------------------------------------------------------ capabilities


@dataclass(frozen=True)
class RemoteCapabilities(Capabilities):
    """:class:`Capabilities` plus what the remote backend negotiated with its server."""

    server: str = ""
    served_model_name: str = ""
    tokenize: bool = False
    prompt_logprobs: bool = False
    logprob_token_ids: bool = False
    cache_salt: bool = False
    # capability -> why it is missing (probe answer or "declared false")
    missing: dict[str, str] = field(default_factory=dict)


_HINTS = {
    "full_vocab_logprobs": "start vLLM with --max-logprobs -1",
    "continuation_scoring": "a vLLM server (prompt_logprobs or logprob_token_ids, and /tokenize) is needed",
    "tokenize": "the server needs vLLM's /tokenize and /detokenize routes",
    "chat_template": "serve a model with a chat template, or use a plain-text template",
    "generation": "the server must serve /v1/completions",
    "decode_session": "token-by-token mechanisms need full-vocabulary log-probabilities (--max-logprobs -1)",
    "embeddings": "serve an embedding model (vllm serve --task embed) and configure it as kind 'embedder'",
}
