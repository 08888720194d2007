"""A tiny OpenAI/vLLM-shaped HTTP server on loopback, for unit tests of the remote client's behaviour.

It speaks just enough of vLLM's API (``/v1/models``, ``/tokenize``, ``/detokenize``,
``/tokenizer_info``, ``/v1/completions``, ``/v1/embeddings``) for ``app.llm.remote`` to
load and run against it, with a toy model whose log-probabilities are exact and known:
one token per printable character, and ``log p(next | prefix)`` a fixed function of the
prefix's last token. Faults are scripted per path (status codes, hangs, dropped
connections) so retries, timeouts and refusals can be tested without vLLM.
"""

from __future__ import annotations

import json
import string
import threading
import time
from collections import defaultdict, deque
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np

EOS = "<eos>"
VOCAB = [EOS] + list(string.printable)
VOCAB_SIZE = len(VOCAB)
_INDEX = {c: i for i, c in enumerate(VOCAB)}


def tokenize(text: str) -> list[int]:
    out, i = [], 0
    while i < len(text):
        if text.startswith(EOS, i):
            out.append(0)
            i += len(EOS)
        else:
            out.append(_INDEX.get(text[i], _INDEX["?"]))
            i += 1
    return out


def detokenize(ids) -> str:
    return "".join(VOCAB[int(t)] for t in ids)


def next_logprobs(prefix: list[int]) -> np.ndarray:
    """The toy model: log-softmax of a bump centred on a position set by the last token."""
    last = prefix[-1] if prefix else 0
    centre = (last * 7 + len(prefix)) % VOCAB_SIZE
    z = -((np.arange(VOCAB_SIZE) - centre) ** 2) / 40.0
    return z - np.log(np.exp(z - z.max()).sum()) - z.max()


def chat_text(messages, add_generation_prompt: bool) -> str:
    text = "".join(f"[{m['role']}]{m['content']}{EOS}" for m in messages)
    return text + ("[assistant]" if add_generation_prompt else "")


class FakeVLLM:
    """Start with ``with FakeVLLM() as srv:``; ``srv.url`` is the OpenAI base URL (``.../v1``)."""

    def __init__(self, *, model: str = "toy", api_key: str | None = None, max_logprobs: int = -1,
                 reject: tuple[str, ...] = (), delay: float = 0.0, port: int = 0):
        self.model = model
        self.port = port
        self.api_key = api_key
        self.max_logprobs = max_logprobs  # like --max-logprobs: -1 is the whole vocabulary
        self.reject = set(reject)  # features answered with 400: cache_salt, prompt_logprobs, logprob_token_ids, chat
        self.delay = delay  # seconds per completion request
        self.requests: list[tuple[str, dict, dict]] = []  # (path, body, headers)
        self.faults: dict[str, deque] = defaultdict(deque)
        self.inflight = 0
        self.max_inflight = 0
        self._lock = threading.Lock()
        self._httpd: ThreadingHTTPServer | None = None

    # ------------------------------------------------------------ scripting

    def fail(self, path: str, *actions) -> None:
        """Next requests to ``path`` get these instead of an answer: an int status, ("status", code,
        retry_after), ("hang", seconds), "drop" (close the connection without answering), ("echo", code): that
        status with an error that quotes the request's prompt, as a server's request-validation error quotes its
        input."""
        for a in actions:
            self.faults[path].append(a)

    def bodies(self, path: str) -> list[dict]:
        return [b for p, b, _ in self.requests if p == path]

    # ------------------------------------------------------------ lifecycle

    def __enter__(self) -> FakeVLLM:
        srv = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # quiet
                pass

            def do_GET(self):
                srv._handle(self, "GET")

            def do_POST(self):
                srv._handle(self, "POST")

        self._httpd = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self._httpd.daemon_threads = True
        threading.Thread(target=self._httpd.serve_forever, name="fake-vllm", daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        assert self._httpd is not None
        self._httpd.shutdown()
        self._httpd.server_close()

    @property
    def root(self) -> str:
        assert self._httpd is not None
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    @property
    def url(self) -> str:
        return self.root + "/v1"

    # ------------------------------------------------------------- serving

    def _handle(self, h: BaseHTTPRequestHandler, method: str) -> None:
        n = int(h.headers.get("Content-Length") or 0)
        raw = h.rfile.read(n) if n else b""
        try:
            body = json.loads(raw) if raw else {}
        except ValueError:
            body = {}
        path = h.path.split("?")[0]
        with self._lock:
            self.requests.append((path, body, dict(h.headers)))
            fault = self.faults[path].popleft() if self.faults[path] else None
            self.inflight += 1
            self.max_inflight = max(self.max_inflight, self.inflight)
        try:
            if fault == "drop":
                h.close_connection = True
                h.connection.shutdown(2)
                return
            if isinstance(fault, tuple) and fault[0] == "hang":
                time.sleep(fault[1])
                fault = None
            if isinstance(fault, int):
                return self._send(h, fault, {"error": {"message": f"scripted {fault}", "type": "Scripted"}})
            if isinstance(fault, tuple) and fault[0] == "echo":
                prompt = body.get("prompt") or body.get("messages")
                if isinstance(prompt, list) and all(isinstance(t, int) for t in prompt):
                    prompt = detokenize(prompt)  # token ids quoted as the text they stand for
                quoted = str(prompt)[:2000]
                return self._send(h, fault[1], {"error": {"message": f"invalid request, input: {quoted}"}})
            if isinstance(fault, tuple) and fault[0] == "status":
                return self._send(h, fault[1], {"error": {"message": f"scripted {fault[1]}"}},
                                  headers={"Retry-After": str(fault[2])})
            if self.api_key and h.headers.get("Authorization") != f"Bearer {self.api_key}":
                return self._send(h, 401, {"error": {"message": "Unauthorized"}})
            status, payload = self._answer(method, path, body)
            self._send(h, status, payload)
        finally:
            with self._lock:
                self.inflight -= 1

    @staticmethod
    def _send(h, status: int, payload: dict, headers: dict | None = None) -> None:
        data = json.dumps(payload).encode()
        try:
            h.send_response(status)
            h.send_header("Content-Type", "application/json")
            h.send_header("Content-Length", str(len(data)))
            for k, v in (headers or {}).items():
                h.send_header(k, v)
            h.end_headers()
            h.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):  # the client gave up (timeout tests)
            pass

    def _bad(self, message: str, param: str | None = None):
        return 400, {"error": {"message": message, "type": "BadRequestError", "param": param, "code": 400}}

    def _answer(self, method: str, path: str, body: dict):
        if path == "/v1/models":
            return 200, {"object": "list", "data": [{"id": self.model, "object": "model", "max_model_len": 256}]}
        if body.get("model") not in (None, self.model):
            return 404, {"error": {"message": f"The model `{body.get('model')}` does not exist."}}
        if path == "/tokenize":
            if "messages" in body:
                if "chat" in self.reject:
                    return self._bad("this model has no chat template")
                text = chat_text(body["messages"], body.get("add_generation_prompt", True))
            else:
                text = body["prompt"]
            return 200, {"tokens": tokenize(text), "count": 0, "max_model_len": 256}
        if path == "/detokenize":
            return 200, {"prompt": detokenize(body["tokens"])}
        if path == "/tokenizer_info":
            return 200, {"tokenizer_class": "Toy", "eos_token": EOS}
        if path == "/v1/embeddings":
            texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
            data = [{"index": i, "embedding": [float(len(t)), 1.0, 0.0]} for i, t in enumerate(texts)]
            return 200, {"data": data, "model": self.model}
        if path == "/v1/completions":
            return self._completion(body)
        return 404, {"error": {"message": f"no route {path}"}}

    def _completion(self, body: dict):
        if "cache_salt" in body and "cache_salt" in self.reject:
            return self._bad("cache_salt is not supported", "cache_salt")
        if body.get("prompt_logprobs") is not None and "prompt_logprobs" in self.reject:
            return self._bad("prompt_logprobs is not supported", "prompt_logprobs")
        if body.get("logprob_token_ids") and "logprob_token_ids" in self.reject:
            return self._bad("logprob_token_ids is not supported", "logprob_token_ids")
        lp_n = body.get("logprobs")
        limit = VOCAB_SIZE if self.max_logprobs == -1 else self.max_logprobs
        if lp_n is not None and not body.get("logprob_token_ids") and (VOCAB_SIZE if lp_n == -1 else lp_n) > limit:
            return self._bad(f"Requested sample logprobs of {VOCAB_SIZE if lp_n == -1 else lp_n}, which is greater "
                             f"than max allowed: {limit}", "logprobs")
        if self.delay:
            time.sleep(self.delay)
        prompt = body["prompt"]
        ids = tokenize(prompt) if isinstance(prompt, str) else [int(t) for t in prompt]
        max_tokens = int(body.get("max_tokens") or 16)
        # greedy continuation of the toy model
        seq = list(ids)
        out: list[int] = []
        for _ in range(max_tokens):
            t = int(np.argmax(next_logprobs(seq)))
            out.append(t)
            seq.append(t)
            if t == 0:
                break
        finish = "stop" if out and out[-1] == 0 else "length"
        choice: dict = {"index": 0, "text": detokenize([t for t in out if t != 0]), "finish_reason": finish,
                        "logprobs": None, "prompt_logprobs": None,
                        "token_ids": out if body.get("return_token_ids") else None}
        key = (lambda t: f"token_id:{t}") if body.get("return_tokens_as_token_ids") else (lambda t: VOCAB[t])
        if lp_n is not None:
            row = next_logprobs(ids)
            if body.get("logprob_token_ids"):
                chosen = list(dict.fromkeys([out[0]] + [int(t) for t in body["logprob_token_ids"]]))
            elif lp_n == -1:
                chosen = list(range(VOCAB_SIZE))
            else:
                chosen = [out[0]] + [int(t) for t in np.argsort(-row)[:lp_n]]
            choice["logprobs"] = {"tokens": [key(out[0])], "token_logprobs": [float(row[out[0]])],
                                  "top_logprobs": [{key(t): float(row[t]) for t in chosen}], "text_offset": [0]}
        if body.get("prompt_logprobs") is not None:
            plp: list = [None]
            for j in range(1, len(ids)):
                plp.append({str(ids[j]): {"logprob": float(next_logprobs(ids[:j])[ids[j]]), "rank": 1,
                                          "decoded_token": VOCAB[ids[j]]}})
            choice["prompt_logprobs"] = plp
        return 200, {"id": "cmpl-fake", "object": "text_completion", "model": self.model, "choices": [choice],
                     "usage": {"prompt_tokens": len(ids), "completion_tokens": len(out),
                               "total_tokens": len(ids) + len(out)}}


def exact_continuation(prompt: str, continuation: str) -> float:
    """The toy model's exact teacher-forced score (what every client route must return)."""
    ids, cont = tokenize(prompt), tokenize(continuation)
    total = 0.0
    for t in cont:
        total += float(next_logprobs(ids)[t])
        ids = ids + [t]
    return total
