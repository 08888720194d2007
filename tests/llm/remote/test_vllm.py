"""The remote backend's contract against a real ``vllm serve`` (CPU) of the bundled SmolLM2-135M-Instruct.

The server serves the safetensors copy that the in-process ``hf`` backend (the ``lm``
fixture) loads, in float32 (``--dtype float32 --max-logprobs -1``; scripts/vllm_ci.sh),
so both backends compute the same function with different kernels.

Tolerance: ``TOL = 1e-3`` nats per scored token, absolute. Both sides are float32;
what differs is the summation order of the matmuls and attention (vLLM's CPU kernels vs
torch's SDPA), which moves logits of magnitude ~30 by a few float32 ulps each. Measured
on this machine: max |difference| 7.1e-5 over the whole 49,152-token vocabulary, 3.1e-5
on continuation sums (docs/vllm.md); 1e-3 leaves a margin of >10x and still catches any
real mismatch (a wrong token, a missing BOS, a shifted position, a bf16 server, all of
which move log-probabilities by 1e-2 or more). A continuation of n tokens gets n x TOL.

Skipped unless DPICL_TEST_VLLM_URL is set (see conftest.py).
"""

from __future__ import annotations

import time

import numpy as np
import pytest

from app.llm import CapabilityError

from .conftest import VLLM_URL, load_remote_lm, needs_vllm

pytestmark = [needs_vllm, pytest.mark.usefixtures("one_torch_thread")]

TOL = 1e-3  # nats per token; see the module doc


@pytest.fixture(scope="module")
def task():
    from app.icl import load_bundled

    return load_bundled()


@pytest.fixture(scope="module")
def prompts(lm, task):
    chat = lm.apply_chat_template([
        {"role": "system", "content": task.template.instruction},
        {"role": "user", "content": "My card was charged two times for one order."},
    ])
    return [
        "The capital of France is",
        chat + (task.template.output_prefix or ""),
        "Hello",
        "Q: 2 + 2 = ?\nA:",
    ]


def test_capabilities_are_discovered(remote_lm, lm):
    caps = remote_lm.capabilities()
    print("remote capabilities:", caps.to_dict())
    assert caps.backend == "remote" and caps.server == VLLM_URL.rstrip("/")
    for name in ("full_vocab_logprobs", "continuation_scoring", "generation", "chat_template", "decode_session",
                 "tokenize", "prompt_logprobs", "logprob_token_ids", "cache_salt"):
        assert getattr(caps, name) is True, (name, caps.missing)
    assert caps.vocab_size == lm.vocab_size == 49152
    assert caps.max_context and caps.max_context <= lm.capabilities().max_context
    assert remote_lm.eos_token_ids == lm.eos_token_ids


def test_configured_like_any_other_model(remote_lm):
    """DPICL_MODELS -> Runtime.load_models -> a served remote model whose capabilities /v1/models can list."""
    import json

    from app.config import load_settings
    from app.runtime import Runtime

    settings = load_settings(
        database_url="sqlite:///:memory:", migrate_on_startup=False,
        models=[{"name": "vllm-lm", "kind": "lm", "backend": "remote", "source": VLLM_URL,
                 "options": {"served_model_name": remote_lm.model_id, "max_concurrency": 4, "timeout": 60}}],
    )
    rt = Runtime.create(settings)
    try:
        rt.load_models()
        model = rt.get_model(None, "lm")
        assert model.name == "vllm-lm" and model.backend == "remote"
        caps = json.loads(json.dumps(model.capabilities().to_dict()))
        assert caps["full_vocab_logprobs"] and caps["served_model_name"] == remote_lm.model_id
    finally:
        rt.models["vllm-lm"].close()
        rt.close()


def test_tokens_and_chat_template_are_the_hf_backends(remote_lm, lm, prompts):
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi there!"}]
    assert remote_lm.apply_chat_template(messages) == lm.apply_chat_template(messages)
    assert remote_lm.apply_chat_template(messages, add_generation_prompt=False) == \
        lm.apply_chat_template(messages, add_generation_prompt=False)
    for p in prompts + [" billing", " Technology 123", "naïve café ✓"]:
        assert remote_lm.tokenize(p) == lm.tokenize(p), p
    ids = lm.tokenize("Paris, Lyon and Marseille")
    assert remote_lm.detokenize(ids) == lm.detokenize(ids)


def test_next_token_logprobs_agree_with_hf(remote_lm, lm, prompts):
    t0 = time.perf_counter()
    got = remote_lm.next_token_logprobs(prompts)
    took = time.perf_counter() - t0
    want = lm.next_token_logprobs(prompts)
    assert got.shape == want.shape == (len(prompts), 49152) and got.dtype == np.float32
    diff = np.abs(got.astype(np.float64) - want)
    print(f"next-token logprobs: max |diff| {diff.max():.3g}, mean {diff.mean():.3g}; "
          f"{len(prompts)} prompts in {took:.1f} s")
    assert diff.max() <= TOL
    assert (got.argmax(1) == want.argmax(1)).all()
    np.testing.assert_allclose(np.exp(got.astype(np.float64)).sum(1), 1.0, atol=1e-4)


CONTS = [" billing", " shipping", " Paris is lovely in spring", "", " 4"]


@pytest.fixture(scope="module")
def hf_scores(lm, prompts):
    return lm.continuation_logprobs(prompts, CONTS)


@pytest.mark.parametrize("route, declared", [
    ("default: label ids + prompt_logprobs", {}),
    ("label ids only (teacher forcing by prefix)", {"prompt_logprobs": False, "full_vocab_logprobs": False}),
    ("prompt_logprobs only", {"logprob_token_ids": False, "full_vocab_logprobs": False}),
])
def test_continuation_scores_agree_with_hf(remote_lm, lm, prompts, hf_scores, route, declared):
    conts = CONTS
    model = remote_lm if not declared else load_remote_lm(capabilities=declared)
    try:
        t0 = time.perf_counter()
        got = model.continuation_logprobs(prompts, conts)
        took = time.perf_counter() - t0
    finally:
        if model is not remote_lm:
            model.close()
    want = hf_scores
    n_tokens = np.array([max(1, len(lm.tokenize(c))) if c else 1 for c in conts])
    diff = np.abs(got - want)
    print(f"{route}: max |diff| {diff.max():.3g} ({took:.1f} s)")
    assert got.shape == want.shape and got.dtype == np.float64
    assert (got[:, 3] == 0).all()  # the empty continuation
    assert (diff <= TOL * n_tokens[None, :]).all(), diff


def test_continuation_by_full_vocabulary_agrees(lm):
    model = load_remote_lm(capabilities={"prompt_logprobs": False, "logprob_token_ids": False})
    try:
        got = model.continuation_logprobs(["The capital of France is"], [" Paris", " Lyon"])
    finally:
        model.close()
    want = lm.continuation_logprobs(["The capital of France is"], [" Paris", " Lyon"])
    assert np.abs(got - want).max() <= TOL


def test_more_than_128_label_tokens_are_split(remote_lm, lm):
    # vLLM caps logprob_token_ids at 128 per request; 150 one-token labels take two requests.
    vocab_ids = [i for i in range(1000, 4000) if len(lm.tokenize(lm.detokenize([i]))) == 1
                 and lm.tokenize(lm.detokenize([i])) == [i]][:150]
    labels = [lm.detokenize([i]) for i in vocab_ids]
    assert len(labels) == 150
    before = remote_lm.transport.stats["requests"]
    got = remote_lm.continuation_logprobs(["Pick a word:"], labels)
    want = lm.continuation_logprobs(["Pick a word:"], labels)
    assert np.abs(got - want).max() <= TOL
    assert remote_lm.transport.stats["requests"] - before <= 2 + 1 + 150  # 2 scoring requests + tokenization


def test_greedy_generation_matches_hf(remote_lm, lm):
    prompts = ["The capital of France is", lm.apply_chat_template([{"role": "user", "content": "Name a colour."}])]
    got = remote_lm.generate(prompts, max_new_tokens=12)
    want = lm.generate(prompts, max_new_tokens=12)
    print("greedy:", [g.text for g in got])
    # Greedy argmax is stable under 1e-4 logit differences unless two tokens tie that closely.
    assert [g.token_ids for g in got] == [w.token_ids for w in want]
    assert [g.text for g in got] == [w.text for w in want]
    assert [g.finish_reason for g in got] == [w.finish_reason for w in want]
    stopped = remote_lm.generate(["Count: 1, 2, 3,"], max_new_tokens=20, stop=[" 6"])
    assert stopped[0].finish_reason == "stop" and " 6" not in stopped[0].text


def test_decode_session_agrees_with_hf_and_clip_softmax_sees_the_same_step(remote_lm, lm):
    from scipy.special import log_softmax

    from app.mechanisms import clip_softmax, poe_decode

    prompts = ["The weather today is", "My favourite food is"]
    with remote_lm.start_decode(prompts) as rs, lm.start_decode(prompts) as hs:
        for token in (None, lm.tokenize(" very")[0]):
            if token is not None:
                rs.step(token)
                hs.step(token)
            r, h = rs.logits.astype(np.float64), hs.logits.astype(np.float64)
            assert np.abs(r - log_softmax(h, axis=1)).max() <= TOL
            # Remote "logits" are log-probabilities: a per-row shift, which these mechanisms remove.
            assert np.abs(clip_softmax.step_log_probs(r, 10.0, 1.0) - clip_softmax.step_log_probs(h, 10.0, 1.0)).max() <= 2 * TOL
            assert np.abs(poe_decode.step_log_probs(r, 8.0, 0.5) - poe_decode.step_log_probs(h, 8.0, 0.5)).max() <= 2 * TOL
        assert rs.token_ids(0) == hs.token_ids(0)


def test_rnm_classification_through_vllm(remote_lm, lm, task):
    from app.mechanisms import get_mechanism

    rnm = get_mechanism("rnm")
    ex, labels, tpl = task.exemplars()[:4], task.labels, task.template
    query = task.test[0].input
    params = {"epsilon": 2.0, "partitions": 4, "shots_per_partition": 1}
    t0 = time.perf_counter()
    got = rnm.classify(remote_lm, ex, query, labels, tpl, params, np.random.default_rng(7))
    took = time.perf_counter() - t0
    want = rnm.classify(lm, ex, query, labels, tpl, params, np.random.default_rng(7))
    print(f"rnm on vLLM: {got.label!r} in {took:.1f} s; votes {got.internals['clean_votes']}")
    assert got.label in labels and got.mechanism == "rnm"
    assert got.privacy["epsilon"] == pytest.approx(want.privacy["epsilon"])
    np.testing.assert_allclose(got.internals["partition_label_probs"], want.internals["partition_label_probs"],
                               atol=5 * TOL)
    # Same probabilities (to 1e-3), same votes, same seeded noise: the same release.
    assert np.array_equal(got.internals["clean_votes"], want.internals["clean_votes"])
    assert got.label == want.label


def test_missing_capabilities_are_refused_by_name(task):
    from app.mechanisms import get_mechanism
    from app.mechanisms.gen_decode import open_session

    model = load_remote_lm(capabilities={"full_vocab_logprobs": False, "prompt_logprobs": False,
                                         "logprob_token_ids": False})
    try:
        caps = model.capabilities()
        assert not caps.full_vocab_logprobs and not caps.continuation_scoring and not caps.decode_session
        with pytest.raises(CapabilityError, match=r"lacks the capability 'full_vocab_logprobs'.*--max-logprobs -1"):
            model.next_token_logprobs(["Hello"])
        with pytest.raises(CapabilityError, match="lacks the capability 'decode_session'"):
            open_session(model, ["Hello"])
        with pytest.raises(CapabilityError, match="lacks the capability 'continuation_scoring'"):
            get_mechanism("rnm").classify(model, task.exemplars()[:2], "refund", task.labels, task.template,
                                          {"epsilon": 1.0, "partitions": 2}, np.random.default_rng(0))
        assert model.generate(["Hello"], max_new_tokens=2)[0].token_ids  # what it has still works
    finally:
        model.close()


def test_salted_and_unsalted_tenants_get_the_same_numbers(remote_lm):
    from app.llm.remote import cache_salt_scope

    p = ["A shared prefix that is long enough to fill a cache block " * 12 + "and then"]
    a = remote_lm.continuation_logprobs(p, [" more", " less"])
    with cache_salt_scope("tenant-a"):
        b = remote_lm.continuation_logprobs(p, [" more", " less"])
        b2 = remote_lm.continuation_logprobs(p, [" more", " less"])
    with cache_salt_scope("tenant-b"):
        c = remote_lm.continuation_logprobs(p, [" more", " less"])
    assert np.abs(a - b).max() <= TOL and np.abs(b - b2).max() <= TOL and np.abs(a - c).max() <= TOL


def test_canary_mia_audit_end_to_end_on_vllm(remote_lm, tmp_path):
    """A canary_mia job (POST /v1/audits, in-process runner, SQLite) whose target runs rnm on the vLLM model."""
    try:
        import app.jobs.kinds.canary_mia  # noqa: F401
    except ModuleNotFoundError:
        pytest.skip("the canary_mia job kind is not in this tree")
    import httpx

    from app.api.main import create_app
    from app.runtime import Runtime
    from tests.conftest import LiveServer, free_port, server_settings

    settings = server_settings(f"sqlite:///{tmp_path / 'dpicl.db'}", load_models=False, job_runner="inprocess",
                               auth_mode="open", job_poll_seconds=0.1, artifacts_dir=str(tmp_path / "artifacts"))
    rt = Runtime.create(settings, models={remote_lm.name: remote_lm})
    srv = LiveServer(create_app(settings, runtime=rt), free_port())
    srv.start()
    before = remote_lm.transport.stats["requests"]
    try:
        with httpx.Client(base_url=srv.url, timeout=30) as client:
            config = {
                "target": {"type": "mechanism", "mechanism": "rnm", "model": remote_lm.name,
                           "params": {"epsilon": 1.0, "delta": 1e-5, "partitions": 2, "shots_per_partition": 1}},
                "dataset": {"size": 2},
                "mode": "bootstrap", "n_llm": 2, "n_sample": 20_000, "seed": 3,
            }
            r = client.post("/v1/audits", json={"kind": "canary_mia", "config": config, "claimed_epsilon": 1.0})
            assert r.status_code == 202, r.text
            job_id = r.json()["id"]
            deadline = time.monotonic() + 600
            while True:
                job = client.get(f"/v1/audits/{job_id}").json()
                if job["status"] in ("succeeded", "failed", "cancelled") or time.monotonic() > deadline:
                    break
                time.sleep(0.5)
    finally:
        srv.stop()
        rt.close()
    assert job["status"] == "succeeded", job.get("error")
    res = job["result"]
    print("canary_mia on vLLM:", {k: res.get(k) for k in ("epsilon", "epsilon_claimed", "model_calls")}, job["verdict"])
    assert res["epsilon_claimed"] == pytest.approx(1.0)
    # Four model calls on a 135M model rarely change the vote: the audit must then say it could not
    # have seen a violation (inconclusive, with the reason), never "pass" (issue 14).
    assert job["verdict"] in ("pass", "violation", "inconclusive")
    if job["verdict"] == "inconclusive":
        assert job["verdict_reason"] and not (res.get("power") or {}).get("sufficient")
    assert remote_lm.transport.stats["requests"] > before  # the audit's model calls went to vLLM
