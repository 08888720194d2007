"""Unit tests of the remote backend's client behaviour against a fake server on loopback.

No vLLM needed (these run in the main suite): retries and back-off, timeouts, bounded
concurrency, credentials, capability discovery and refusals, cache salts, and the
three continuation-scoring routes agreeing exactly on a toy model.
"""

from __future__ import annotations

import socket
import threading
import time

import numpy as np
import pytest

from app.llm import CapabilityError, ModelLoadError, ModelSpec, load_model
from app.llm.remote import RemoteError, RemoteTimeout, cache_salt_scope

from .fake_server import (
    VOCAB_SIZE,
    FakeVLLM,
    exact_continuation,
    next_logprobs,
    tokenize,
)

FAST = {"backoff": 0.01, "backoff_max": 0.05}


def remote(url: str, kind: str = "lm", **options):
    spec = ModelSpec(name="toy-remote", kind=kind, source=url, backend="remote", options={**FAST, **options})
    return load_model(spec, cache_dir="/nonexistent-not-used")


@pytest.fixture
def toy(server):
    lm = remote(server.url)
    yield lm
    lm.close()


# ----------------------------------------------------------------- loading


def test_discovers_capabilities_and_facts(server, toy):
    caps = toy.capabilities()
    assert caps.backend == "remote" and caps.served_model_name == "toy"
    assert caps.full_vocab_logprobs and caps.continuation_scoring and caps.generation and caps.chat_template
    assert caps.decode_session and caps.tokenize and caps.prompt_logprobs and caps.logprob_token_ids
    assert caps.vocab_size == VOCAB_SIZE and caps.max_context == 256 and caps.cache_salt
    assert toy.eos_token_ids == frozenset({0})  # from /tokenizer_info
    assert caps.to_dict()["server"] == server.url


def test_load_errors_name_the_problem(server):
    with pytest.raises(ModelLoadError, match="does not serve 'other'.*served_model_name"):
        remote(server.url, served_model_name="other")
    with pytest.raises(ModelLoadError, match="unknown option.*'max_concurency'"):
        remote(server.url, max_concurency=2)
    with pytest.raises(ModelLoadError, match="backend 'remote' needs the server's OpenAI base URL"):
        remote("bundled:smollm2-135m-instruct")
    with pytest.raises(ModelLoadError, match="option 'max_concurrency' must be >= 1"):
        remote(server.url, max_concurrency=0)
    with pytest.raises(ModelLoadError, match="'api_key_env' names 'DPICL_NO_SUCH_VAR'"):
        remote(server.url, api_key_env="DPICL_NO_SUCH_VAR")
    with pytest.raises(ModelLoadError, match="capabilities.*unknown capabilities"):
        remote(server.url, capabilities={"telepathy": True})


def test_unreachable_server_is_a_load_error():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed once the block ends: nothing listens there
    t0 = time.monotonic()
    with pytest.raises(ModelLoadError, match=r"cannot list the server's models.*cannot reach.*4 attempts"):
        remote(f"http://127.0.0.1:{port}/v1", max_retries=3)
    assert time.monotonic() - t0 < 5


def test_declared_capability_the_server_lacks_fails_the_load():
    with FakeVLLM(max_logprobs=20) as srv, \
            pytest.raises(ModelLoadError, match="'full_vocab_logprobs' is declared but the server lacks it"):
        remote(srv.url, capabilities={"full_vocab_logprobs": True})


def test_server_without_cache_salt_is_refused_unless_turned_off():
    with FakeVLLM(reject=("cache_salt",)) as srv:
        with pytest.raises(ModelLoadError, match="rejects cache_salt.*side channel"):
            remote(srv.url)
        n = len(srv.bodies("/v1/completions"))
        lm = remote(srv.url, cache_salt="off")
        try:
            assert lm.capabilities().cache_salt is False
            lm.next_token_logprobs(["ab"])
            assert all("cache_salt" not in b for b in srv.bodies("/v1/completions")[n:])
        finally:
            lm.close()


# ------------------------------------------------------------ refusals


def test_max_logprobs_20_server_refuses_full_vocab_naming_it():
    with FakeVLLM(max_logprobs=20) as srv:
        lm = remote(srv.url)
        try:
            caps = lm.capabilities()
            assert not caps.full_vocab_logprobs and not caps.decode_session
            assert caps.continuation_scoring  # label ids and prompt_logprobs still work
            assert "max allowed: 20" in caps.missing["full_vocab_logprobs"]
            with pytest.raises(CapabilityError, match=r"lacks the capability 'full_vocab_logprobs'.*--max-logprobs -1"):
                lm.next_token_logprobs(["hello"])
            with pytest.raises(CapabilityError, match="lacks the capability 'decode_session'"):
                lm.start_decode(["hello"])
            np.testing.assert_allclose(lm.continuation_logprobs(["hello"], [" w"]),
                                       [[exact_continuation("hello", " w")]], atol=1e-6)
        finally:
            lm.close()


def test_no_scoring_route_refuses_continuations_and_rnm():
    from app.mechanisms import get_mechanism

    with FakeVLLM(max_logprobs=5, reject=("prompt_logprobs", "logprob_token_ids")) as srv:
        lm = remote(srv.url)
        try:
            assert not lm.capabilities().continuation_scoring
            with pytest.raises(CapabilityError, match="lacks the capability 'continuation_scoring'"):
                lm.continuation_logprobs(["a"], ["b"])
            exemplars = [("I was charged twice", "billing"), ("Where is my parcel", "shipping")]
            with pytest.raises(CapabilityError, match="'continuation_scoring'"):
                get_mechanism("rnm").classify(lm, exemplars, "refund please", ["billing", "shipping"], None,
                                              {"epsilon": 1.0, "partitions": 2}, np.random.default_rng(0))
        finally:
            lm.close()


def test_declared_false_switches_a_feature_off(server):
    lm = remote(server.url, capabilities={"chat_template": False, "generation": False})
    try:
        with pytest.raises(CapabilityError, match=r"'chat_template'.*\(declared false\)"):
            lm.apply_chat_template([{"role": "user", "content": "x"}])
        with pytest.raises(CapabilityError, match="'generation'"):
            lm.generate(["x"])
    finally:
        lm.close()


# ------------------------------------------------------------- scoring


def test_all_continuation_routes_are_exact(server):
    prompts = ["Hello there", "ab"]
    conts = [" x", " yes", "", "Z", " a long label"]
    want = np.array([[exact_continuation(p, c) for c in conts] for p in prompts])
    routes = {
        "default": {},  # single tokens by logprob_token_ids, longer by prompt_logprobs
        "label ids only": {"capabilities": {"prompt_logprobs": False}},
        "prompt_logprobs only": {"capabilities": {"logprob_token_ids": False, "full_vocab_logprobs": False}},
        "full vocab only": {"capabilities": {"logprob_token_ids": False, "prompt_logprobs": False}},
    }
    for name, opts in routes.items():
        lm = remote(server.url, **opts)
        try:
            got = lm.continuation_logprobs(prompts, conts)
        finally:
            lm.close()
        np.testing.assert_allclose(got, want, atol=1e-6, err_msg=name)
        assert got.dtype == np.float64 and got[:, 2].tolist() == [0.0, 0.0]


def test_label_ids_are_chunked_at_128():
    from app.llm.remote import MAX_LOGPROB_TOKEN_IDS

    assert MAX_LOGPROB_TOKEN_IDS == 128
    with FakeVLLM() as srv:
        lm = remote(srv.url, capabilities={"prompt_logprobs": False})
        try:
            labels = [c for c in "abcdefghijklmnopqrstuvwxyz"]
            lm.continuation_logprobs(["q"], labels)
            sent = [b for b in srv.bodies("/v1/completions") if b.get("logprob_token_ids")][-1]
            assert sorted(sent["logprob_token_ids"]) == sorted(set(tokenize("".join(labels))))
            assert sent["logprobs"] == len(sent["logprob_token_ids"])
        finally:
            lm.close()


def test_next_token_logprobs_and_decode_session(server, toy):
    lp = toy.next_token_logprobs(["abc", "Hello"])
    assert lp.shape == (2, VOCAB_SIZE) and lp.dtype == np.float32
    np.testing.assert_allclose(lp[0], next_logprobs(tokenize("abc")), atol=1e-6)
    with toy.start_decode(["abc", "Hello"]) as s:
        np.testing.assert_allclose(s.logits, lp, atol=1e-6)
        s.step(5)
        np.testing.assert_allclose(s.logits[1], next_logprobs(tokenize("Hello") + [5]), atol=1e-6)
        s.keep([1])
        s.step([7])
        assert s.rows == [1] and s.token_ids(1) == tokenize("Hello") + [5, 7]
    body = server.bodies("/v1/completions")[-1]
    assert body["prompt"] == tokenize("Hello") + [5, 7] and body["logprobs"] == -1
    assert body["temperature"] == 0.0 and body["add_special_tokens"] is False


def test_decode_session_fork_steps_independently(server, toy):
    with toy.start_decode(["abc", "Hello"]) as s:
        s.step(5)
        f = s.fork()
        np.testing.assert_array_equal(f.logits, s.logits)
        f.step([7, 8])
        s.step(9)
        assert f.token_ids(0) == tokenize("abc") + [5, 7] and s.token_ids(0) == tokenize("abc") + [5, 9]
        np.testing.assert_allclose(f.logits[1], next_logprobs(tokenize("Hello") + [5, 8]), atol=1e-6)
        np.testing.assert_allclose(s.logits[1], next_logprobs(tokenize("Hello") + [5, 9]), atol=1e-6)
        f.keep([1])
        assert f.rows == [1] and s.rows == [0, 1]
    with pytest.raises(RuntimeError, match="closed"):
        s.fork()


def test_generate_and_chat(server, toy):
    out = toy.generate(["ab", "Hello"], max_new_tokens=3)
    assert [g.finish_reason for g in out] == ["length", "length"] and all(len(g.token_ids) == 3 for g in out)
    toy.generate(["ab"], max_new_tokens=2, temperature=0.7, seed=11)
    body = server.bodies("/v1/completions")[-1]
    assert body["seed"] == 11 and body["temperature"] == 0.7 and body["top_k"] == 0 and body["repetition_penalty"] == 1
    text = toy.apply_chat_template([{"role": "user", "content": "hi"}])
    assert text == "[user]hi<eos>[assistant]" and toy.tokenize(text) == tokenize(text)


def test_generation_without_vllm_tokenize_sends_text_and_standard_fields(server):
    lm = remote(server.url, capabilities={"tokenize": False})
    try:
        caps = lm.capabilities()
        assert caps.generation and not caps.continuation_scoring and not caps.full_vocab_logprobs
        out = lm.generate(["ab"], max_new_tokens=3, seed=5)
        body = server.bodies("/v1/completions")[-1]
        assert body["prompt"] == "ab" and body["seed"] == 5 and body["max_tokens"] == 3
        assert not {"top_k", "return_token_ids", "add_special_tokens"} & set(body) and "cache_salt" in body
        assert out[0].text and out[0].finish_reason == "length"
        with pytest.raises(CapabilityError, match="'tokenize'"):
            lm.tokenize("ab")
    finally:
        lm.close()


def test_embedder(server):
    emb = remote(server.url, kind="embedder", embed_batch_size=2)
    try:
        assert emb.capabilities().embeddings and emb.dim == 3
        v = emb.embed(["a", "bbb", "cc", "dddd", "e"])
        assert v.shape == (5, 3) and np.allclose(np.linalg.norm(v, axis=1), 1.0)
        assert v[1, 0] / v[1, 1] == pytest.approx(3.0)  # order kept across chunks
        assert len(server.bodies("/v1/embeddings")) == 1 + 3
    finally:
        emb.close()


# ------------------------------------------------------ retries, timeouts


def test_idempotent_calls_retry_with_backoff_on_5xx_and_429(server, toy):
    server.fail("/v1/completions", 503, 502, ("status", 429, "0.05"))
    t0 = time.monotonic()
    lp = toy.next_token_logprobs(["abc"])
    assert time.monotonic() - t0 >= 0.05  # Retry-After honoured
    np.testing.assert_allclose(lp[0], next_logprobs(tokenize("abc")), atol=1e-6)
    assert toy.transport.stats["retries"] >= 3


def test_retries_are_bounded_and_the_error_names_the_status(server, toy):
    server.fail("/v1/completions", *([500] * 10))
    with pytest.raises(RemoteError, match=r"failed after 4 attempts: HTTP 500: scripted 500"):
        toy.next_token_logprobs(["abc"])


def test_client_errors_are_not_retried(server, toy):
    server.fail("/v1/completions", 400)
    n = len(server.requests)
    with pytest.raises(RemoteError, match="answered HTTP 400: scripted 400"):
        toy.next_token_logprobs(["abc"])
    assert len(server.requests) == n + 2  # /tokenize, then the one completion: no retry


def test_unseeded_sampling_is_not_resent_after_a_server_error(server, toy):
    server.fail("/v1/completions", 500)
    with pytest.raises(RemoteError, match="HTTP 500"):
        toy.generate(["ab"], max_new_tokens=2, temperature=1.0)
    server.fail("/v1/completions", 503)  # refused before any work: resent even so
    assert len(toy.generate(["ab"], max_new_tokens=2, temperature=1.0)) == 1
    server.fail("/v1/completions", 500)  # greedy is idempotent: resent
    assert len(toy.generate(["ab"], max_new_tokens=2)) == 1


def test_dropped_connection_is_retried_for_idempotent_calls(server, toy):
    server.fail("/v1/completions", "drop")
    assert toy.continuation_logprobs(["ab"], [" c"]).shape == (1, 1)


def test_timeout_is_clean_and_bounded(server):
    lm = remote(server.url, timeout=0.3, max_retries=1)
    try:
        server.fail("/v1/completions", ("hang", 2.0), ("hang", 2.0))
        t0 = time.monotonic()
        with pytest.raises(RemoteTimeout, match=r"timed out \(answer timeout 0.3 s; 2 attempts\)"):
            lm.next_token_logprobs(["abc"])
        took = time.monotonic() - t0
        assert 0.6 <= took < 1.5, took
        assert isinstance(RemoteTimeout("x"), TimeoutError)
        server.fail("/v1/completions", ("hang", 2.0))  # one slow answer, then a good one
        assert lm.next_token_logprobs(["abc"]).shape == (1, VOCAB_SIZE)
    finally:
        lm.close()


def test_one_failed_request_cancels_the_rest_of_the_batch():
    with FakeVLLM(delay=0.3) as srv:
        lm = remote(srv.url, max_concurrency=2, max_retries=0)
        try:
            srv.fail("/v1/completions", 400)
            n = len(srv.bodies("/v1/completions"))
            t0 = time.monotonic()
            with pytest.raises(RemoteError, match="HTTP 400"):
                lm.next_token_logprobs([f"p{i}" for i in range(12)])
            assert time.monotonic() - t0 < 1.5  # not 12 x 0.3 s / 2
            assert len(srv.bodies("/v1/completions")) - n < 12
        finally:
            lm.close()


def test_concurrency_is_bounded():
    with FakeVLLM(delay=0.15) as srv:
        lm = remote(srv.url, max_concurrency=3)
        try:
            srv.max_inflight = 0
            t0 = time.monotonic()
            lp = lm.next_token_logprobs([f"prompt {i}" for i in range(9)])
            took = time.monotonic() - t0
            assert lp.shape == (9, VOCAB_SIZE)
            assert srv.max_inflight == 3  # in parallel, never more than the bound
            assert took < 9 * 0.15  # not one at a time
        finally:
            lm.close()


def test_threads_share_one_bound():
    with FakeVLLM(delay=0.1) as srv:
        lm = remote(srv.url, max_concurrency=2)
        try:
            srv.max_inflight = 0
            errors = []

            def work():
                try:
                    lm.next_token_logprobs(["a", "b", "c"])
                except Exception as exc:  # noqa: BLE001 - any failure is reported below
                    errors.append(exc)

            threads = [threading.Thread(target=work) for _ in range(4)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            assert not errors and srv.max_inflight == 2
        finally:
            lm.close()


def test_api_key_is_sent_and_a_refusal_names_it():
    with FakeVLLM(api_key="sekrit-key") as srv:
        with pytest.raises(ModelLoadError, match="refused the credentials.*api_key"):
            remote(srv.url, api_key="wrong", max_retries=3)
        assert len(srv.bodies("/v1/models")) == 1  # 401 is not retried
        lm = remote(srv.url, api_key="sekrit-key")
        try:
            assert lm.next_token_logprobs(["a"]).shape == (1, VOCAB_SIZE)
            assert all(h.get("Authorization") == "Bearer sekrit-key" for _, _, h in srv.requests[-3:])
        finally:
            lm.close()


def test_closed_model_refuses_cleanly(server):
    lm = remote(server.url)
    lm.close()
    with pytest.raises(RemoteError, match="closed"):
        lm.next_token_logprobs(["a"])


# ------------------------------------------------------------ cache salt


def test_cache_salt_per_call_and_per_tenant(server):
    lm = remote(server.url, cache_salt="a-deployment-secret-of-32-chars!")
    try:
        def salts_of(fn):
            n = len(server.bodies("/v1/completions"))
            fn()
            return {b["cache_salt"] for b in server.bodies("/v1/completions")[n:]}

        # No tenant: one fresh salt per protocol call, shared by its requests only.
        a = salts_of(lambda: lm.next_token_logprobs(["a", "b", "c"]))
        b = salts_of(lambda: lm.next_token_logprobs(["a", "b", "c"]))
        assert len(a) == 1 and len(b) == 1 and a != b and len(next(iter(a))) >= 43
        # A tenant: the same salt on every call of that tenant, another for another tenant.
        with cache_salt_scope("acme"):
            t1 = salts_of(lambda: lm.next_token_logprobs(["a"]))
            t2 = salts_of(lambda: lm.continuation_logprobs(["a"], ["b"]))
        with cache_salt_scope("globex"):
            g = salts_of(lambda: lm.next_token_logprobs(["a"]))
        assert t1 == t2 and len(t1) == 1 and g != t1
        # The salt is keyed: another deployment secret gives the same tenant another salt.
        other = remote(server.url, cache_salt="another-deployment-secret-000000")
        try:
            with cache_salt_scope("acme"):
                o = salts_of(lambda: other.next_token_logprobs(["a"]))
            assert o != t1
        finally:
            other.close()
        with pytest.raises(ModelLoadError, match="cache_salt"):
            remote(server.url, cache_salt="short")
    finally:
        lm.close()


def test_startup_timeout_waits_for_a_late_server():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    srv = FakeVLLM(port=port)
    timer = threading.Timer(0.8, srv.__enter__)  # the server comes up while the client waits
    timer.start()
    try:
        t0 = time.monotonic()
        lm = remote(f"http://127.0.0.1:{port}/v1", startup_timeout=10, max_retries=0)
        assert 0.7 < time.monotonic() - t0 < 8
        lm.close()
    finally:
        timer.join()
        srv.__exit__(None, None, None)
