"""One forward pass per answer (issue 27): the single-token fast path, one-pass multi-token scoring
with a prefix-sharing mask, and the bucketed (CUDA-graph) forward's padding, against the two-stage path.

Exactness is tested on a random-init model in float64 (rounding ~1e-15, so any masking or position
error shows), and on the real bundled SmolLM2 in float32 within its rounding.
"""

from __future__ import annotations

import contextlib

import numpy as np
import pytest
import torch

from app.llm.cuda_graphs import GraphForward, GraphOptions, pad_to_bucket, pick_bucket
from app.llm.passes import segment_mask

from .conftest import model_folder, prefix_reuse

LABELS = [" World", " Sports", " Business", " Technology", " Sci/Tech", " science and technology"]
SINGLE = [" World", " Sports", " Business", " Technology"]


@pytest.fixture(scope="module")
def tiny64(lm):
    """A 2-layer random-init model with SmolLM2's tokenizer, float64, sharp attention (init 0.5)."""
    from app.llm.tiny import random_lm

    return random_lm(model_folder(lm), tiny=True, dtype=torch.float64, init_std=0.5, seed=1)


@contextlib.contextmanager
def paths(model, *, fast: bool, one_pass: bool, graphs=None):
    old = (model.single_token_fast_path, model.one_pass_scoring, model.graphs)
    model.single_token_fast_path, model.one_pass_scoring, model.graphs = fast, one_pass, graphs
    model.clear_prefix_cache()
    try:
        yield model
    finally:
        model.single_token_fast_path, model.one_pass_scoring, model.graphs = old
        model.clear_prefix_cache()


def plain_score(model, prompt: str, cont: str) -> float:
    """sum_j log p(c_j | prompt, c_<j) from one plain cache-free forward pass of prompt + c."""
    p = model.tokenize(prompt)
    c = model.tokenizer(cont, add_special_tokens=False)["input_ids"]
    with torch.inference_mode():
        logits = model.model(input_ids=torch.tensor([p + c])).logits[0].double()
    lp = torch.log_softmax(logits, dim=-1)
    return float(sum(lp[len(p) - 1 + j, t] for j, t in enumerate(c)))


def test_defaults_are_one_pass(lm):
    assert lm.single_token_fast_path and lm.one_pass_scoring and lm.graphs is None  # CPU: eager


@pytest.mark.parametrize("reuse", [False, True])
def test_one_pass_is_exact_in_float64(tiny64, header_prompts, mixed_prompts, reuse):
    prompts = mixed_prompts[:6]
    want = np.array([[plain_score(tiny64, p, c) for c in LABELS] for p in prompts])
    with prefix_reuse(tiny64, reuse):
        got = {}
        for one_pass in (False, True):
            with paths(tiny64, fast=True, one_pass=one_pass):
                got[one_pass] = tiny64.continuation_logprobs(prompts, LABELS)
                one = np.concatenate([tiny64.continuation_logprobs([p], LABELS) for p in prompts])
                np.testing.assert_allclose(one, got[one_pass], rtol=0, atol=1e-10)
    np.testing.assert_allclose(got[True], want, rtol=0, atol=1e-10)
    np.testing.assert_allclose(got[False], want, rtol=0, atol=1e-10)
    assert np.ptp(want, axis=1).min() > 1e-3  # labels tell apart: a wrong mask would show


@pytest.mark.parametrize("one_pass", [True, False], ids=["one-pass", "two-stage"])
def test_lm_head_scores_each_position_once(tiny64, mixed_prompts, one_pass, monkeypatch):
    """Every label's first token is predicted from the prompt's last position: the vocabulary-wide
    LM head and log-softmax run once per distinct (row, position), not once per label token."""
    tok = [tiny64.tokenizer(c, add_special_tokens=False)["input_ids"] for c in LABELS]
    assert len({len(t) for t in tok}) > 1 and min(len(t) for t in tok) == 1  # mixed lengths, shared first position
    prompts = mixed_prompts[:4]
    seen: list[int] = []
    real = tiny64._logits
    monkeypatch.setattr(tiny64, "_logits", lambda h: (seen.append(h.shape[0]), real(h))[1])
    with paths(tiny64, fast=True, one_pass=one_pass):
        got = tiny64.continuation_logprobs(prompts, LABELS)
    # one_pass: the prompt's last position, then one per later continuation token (shared by none);
    # two-stage: one row per (prompt, label), so the first token's position repeats per label there
    per_prompt = 1 + sum(len(t) - 1 for t in tok) if one_pass else sum(len(t) for t in tok)
    assert sum(seen) == len(prompts) * per_prompt
    want = np.array([[plain_score(tiny64, p, c) for c in LABELS] for p in prompts])
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-10)


def test_single_token_fast_path_is_exact_in_float64(tiny64, header_prompts):
    with paths(tiny64, fast=False, one_pass=False):
        two_stage = tiny64.continuation_logprobs(header_prompts, SINGLE)
    with paths(tiny64, fast=True, one_pass=True):
        tiny64.stats.reset()
        fast = tiny64.continuation_logprobs(header_prompts, SINGLE)
        assert tiny64.stats.forward_calls == 2  # the shared header once (CPU), then the prompts' tails
        tiny64.stats.reset()
        assert np.array_equal(tiny64.continuation_logprobs(header_prompts, SINGLE), fast)
        assert tiny64.stats.forward_calls == 1  # header from the LRU: one pass for the whole answer
    np.testing.assert_allclose(fast, two_stage, rtol=0, atol=1e-10)


@pytest.mark.parametrize("labels", [SINGLE, LABELS])
def test_bucketed_forward_equals_eager(tiny64, mixed_prompts, labels):
    """The CUDA-graph path's padding to a bucket and its masks (run eagerly here: capture=False)."""
    graphs = GraphForward(tiny64._base, tiny64.device, tiny64._pad_id, GraphOptions(mode="graph"), capture=False)
    with paths(tiny64, fast=True, one_pass=True):
        want = tiny64.continuation_logprobs(mixed_prompts, labels)
    with paths(tiny64, fast=True, one_pass=True, graphs=graphs):
        tiny64.stats.reset()
        got = tiny64.continuation_logprobs(mixed_prompts, labels)
        assert tiny64.stats.forward_calls == 1 and tiny64.stats.reused_tokens == 0  # one padded replay
        assert tiny64.stats.padded_tokens == graphs.last_padded_tokens >= tiny64.stats.forward_tokens
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-10)


@pytest.mark.parametrize("labels", [SINGLE, LABELS], ids=["single-token", "multi-token"])
def test_a_batch_larger_than_every_bucket_replays_several_buckets(tiny64, mixed_prompts, labels):
    """8 rows, buckets of at most 4 x 128 tokens: the batch runs as a few bucket replays (never one
    eager pass, never a shared-prefix pass), each row scored as in one eager pass."""
    from app.llm.passes import graph_chunks

    opts = GraphOptions(mode="graph", rows=(1, 2, 4), lengths=(64, 128), max_tokens=512)
    graphs = GraphForward(tiny64._base, tiny64.device, tiny64._pad_id, opts, capture=False)
    with paths(tiny64, fast=True, one_pass=True):
        want = tiny64.continuation_logprobs(mixed_prompts, labels)
    with paths(tiny64, fast=True, one_pass=True, graphs=graphs):
        extra = 0 if labels is SINGLE else sum(len(tiny64.tokenizer(c, add_special_tokens=False)["input_ids"])
                                               for c in labels)
        lengths = [len(tiny64.tokenize(p)) + extra for p in mixed_prompts]
        chunks = graph_chunks(tiny64, lengths)
        assert chunks is not None and sorted(i for c in chunks for i in c) == list(range(8)) and len(chunks) >= 2
        assert all(graphs.fits(len(c), max(lengths[i] for i in c)) for c in chunks)
        tiny64.stats.reset()
        got = tiny64.continuation_logprobs(mixed_prompts, labels)
        assert tiny64.stats.forward_calls == len(chunks) and tiny64.stats.reused_tokens == 0
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-10)
    # A row longer than every bucket: the whole batch runs eagerly (None), as before.
    long_graphs = GraphForward(tiny64._base, tiny64.device, tiny64._pad_id,
                               GraphOptions(mode="graph", rows=(1, 2), lengths=(8,), max_tokens=16), capture=False)
    with paths(tiny64, fast=True, one_pass=True, graphs=long_graphs):
        assert graph_chunks(tiny64, lengths) is None


class _StandInGraph:
    """What a captured ``torch.cuda.CUDAGraph`` does on replay, on a CPU: rerun the captured function
    (the mask from the static segments, then the decoder) on the bucket's static buffers into its
    static output."""

    def __init__(self, graphs, bucket):
        self.graphs, self.bucket = graphs, bucket

    def replay(self):
        b = self.bucket
        b.out.copy_(self.graphs._forward_seg(b.ids, b.pos, b.seg))


@pytest.mark.parametrize("labels", [SINGLE, LABELS], ids=["single-token", "multi-token"])
def test_replay_reads_its_inputs_from_the_buckets_static_buffers(tiny64, mixed_prompts, labels):
    """The replay branch of GraphForward.run (capture=True): host tensors padded and copied into the
    bucket's static ids / positions / segments, the mask rebuilt from the static segments inside the
    replay, the real rows read back; two calls with the rows in other places through the same bucket
    each score as one eager pass (a stale buffer or a mask built from the wrong segments would not)."""
    from app.llm.cuda_graphs import _Bucket

    opts = GraphOptions(mode="graph", rows=(4, 8), lengths=(64, 128))
    graphs = GraphForward(tiny64._base, tiny64.device, tiny64._pad_id, opts, capture=True, dtype=torch.float64)
    for rows, length in opts.buckets():
        b = _Bucket(torch.full((rows, length), tiny64._pad_id), torch.arange(length).expand(rows, length).contiguous(),
                    torch.zeros((rows, length), dtype=torch.long))
        with torch.inference_mode():
            b.out = graphs._forward_seg(b.ids, b.pos, b.seg)
        b.graph = _StandInGraph(graphs, b)
        graphs.buckets[(rows, length)] = b
    with paths(tiny64, fast=True, one_pass=True):
        want = tiny64.continuation_logprobs(mixed_prompts, labels)
        want_rev = tiny64.continuation_logprobs(mixed_prompts[::-1], labels)
    with paths(tiny64, fast=True, one_pass=True, graphs=graphs):
        tiny64.stats.reset()
        got = tiny64.continuation_logprobs(mixed_prompts, labels)
        assert tiny64.stats.forward_calls == 1 and tiny64.stats.padded_tokens == graphs.last_padded_tokens
        assert tiny64.stats.forward_rows == len(mixed_prompts)  # a replay's rows are counted (rows per pass)
        got_rev = tiny64.continuation_logprobs(mixed_prompts[::-1], labels)  # the same bucket, rows moved
        assert tiny64.stats.forward_calls == 2 and tiny64.stats.padded_tokens == 2 * graphs.last_padded_tokens
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-10)
    np.testing.assert_allclose(got_rev, want_rev, rtol=0, atol=1e-10)


def test_one_pass_matches_two_stage_on_smollm2(lm, header_prompts, mixed_prompts):
    """float32: the same quantity within rounding (the two-stage path varies as much across batch shapes)."""
    for prompts in (header_prompts, mixed_prompts):
        with paths(lm, fast=True, one_pass=False):
            two = lm.continuation_logprobs(prompts, LABELS)
        with paths(lm, fast=True, one_pass=True):
            lm.stats.reset()
            one = lm.continuation_logprobs(prompts, LABELS)
            assert lm.stats.forward_calls <= 3  # shared header (when any) + one or two length chunks
        np.testing.assert_allclose(one, two, rtol=0, atol=1e-4)
        assert (one.argmax(1) == two.argmax(1)).all()


def test_rnm_answer_with_single_token_labels_takes_one_pass(lm):
    """An ``rnm`` answer (4 one-shot partitions, the bundled task's single-token labels): one forward pass
    once its header is in the prefix LRU (two before issue 27: the prompts, then every (prompt, label)
    pair over copied caches), with the GPU's chunking (pass_cost_tokens 0, fewest passes)."""
    from app.icl import load_bundled
    from app.mechanisms import get_mechanism

    task = load_bundled()
    ex, labels, tpl = task.exemplars()[:4], task.labels, task.template
    old = lm.pass_cost_tokens
    lm.pass_cost_tokens = 0
    try:
        lm.clear_prefix_cache()
        mech = get_mechanism("rnm")
        mech.classify(lm, ex, task.test[0].input, labels, tpl, {"epsilon": 2.0}, np.random.default_rng(0))
        for q in task.test[1:3]:
            lm.stats.reset()
            mech.classify(lm, ex, q.input, labels, tpl, {"epsilon": 2.0}, np.random.default_rng(0))
            assert lm.stats.forward_calls == 1 and lm.stats.prefix_cache_hits == 1
    finally:
        lm.pass_cost_tokens = old
        lm.clear_prefix_cache()


def test_segment_mask():
    seg = torch.tensor([[0, 0, 1, 1, 2, -1]])
    m = segment_mask(seg)[0, 0].int().tolist()
    assert m == [[1, 0, 0, 0, 0, 0],
                 [1, 1, 0, 0, 0, 0],
                 [1, 1, 1, 0, 0, 0],
                 [1, 1, 1, 1, 0, 0],
                 [1, 1, 0, 0, 1, 0],  # continuation 2 sees the prompt, not continuation 1
                 [1, 1, 0, 0, 0, 0]]  # padding sees the prompt only


def test_buckets_and_fallback():
    opts = GraphOptions.from_options({"cuda_graphs": {"rows": [1, 4, 8], "lengths": [64, 128], "max_tokens": 512}})
    assert opts.buckets() == [(1, 64), (1, 128), (4, 64), (4, 128), (8, 64)]
    assert pick_bucket(opts.buckets(), 3, 100) == (4, 128)
    assert pick_bucket(opts.buckets(), 1, 100) == (1, 128)
    assert pick_bucket(opts.buckets(), 8, 65) is None  # over max_tokens: eager
    assert pick_bucket(opts.buckets(), 9, 10) is None
    padded = GraphForward(None, torch.device("cpu"), 0, opts, capture=False)  # fits/max_rows agree with pick_bucket
    assert all(padded.fits(n, s) == (pick_bucket(opts.buckets(), n, s) is not None)
               for n in range(1, 10) for s in (1, 63, 64, 65, 100, 128, 129))
    assert [padded.max_rows(s) for s in (1, 64, 65, 128, 129)] == [8, 8, 4, 4, 0]
    assert opts.strategy(torch.device("cpu")) == "off"  # CPU: eager only
    assert GraphOptions.from_options({}).strategy(torch.device("cuda")) == "graph"
    assert GraphOptions.from_options({"cuda_graphs": "off"}).strategy(torch.device("cuda")) == "off"
    for bad in ({"cuda_graphs": "fast"}, {"cuda_graphs": {"nope": 1}}, {"cuda_graphs": {"rows": [0]}}):
        with pytest.raises(ValueError):
            GraphOptions.from_options(bad)
    ids, pos, seg = pad_to_bucket(torch.tensor([[5, 6]]), torch.tensor([[0, 1]]), torch.tensor([[0, 0]]), 2, 4, 9)
    assert ids.tolist() == [[5, 6, 9, 9], [9, 9, 9, 9]] and seg.tolist() == [[0, 0, -1, -1], [0, -1, -1, -1]]
    assert pos.tolist() == [[0, 1, 0, 0], [0, 0, 0, 0]]
    # On a CPU no graph is ever captured: nothing fits, every pass is eager.
    g = GraphForward(None, torch.device("cpu"), 0, opts)
    assert g.warm()["captured"] == [] and not g.fits(1, 1) and g.run(ids, pos, seg) is None


def test_one_pass_with_eager_attention(tiny64, header_prompts):
    """Models run with transformers' "eager" attention take an additive float mask (attention_mask_4d)."""
    from app.llm.passes import attention_mask_4d

    m = attention_mask_4d(torch.ones((1, 1), dtype=torch.long), torch.tensor([[0, 1, 2]]), "eager", torch.float64)
    assert m.shape == (1, 1, 3, 4) and m.dtype == torch.float64
    assert (m[0, 0] == 0).int().tolist() == [[1, 1, 0, 0], [1, 1, 1, 0], [1, 1, 0, 1]]
    with paths(tiny64, fast=True, one_pass=False):
        want = tiny64.continuation_logprobs(header_prompts, LABELS)
    old = tiny64._attn_impl
    tiny64.model.set_attn_implementation("eager")
    tiny64._attn_impl = "eager"
    try:
        with paths(tiny64, fast=True, one_pass=True):
            got = tiny64.continuation_logprobs(header_prompts, LABELS)
    finally:
        tiny64.model.set_attn_implementation(old)
        tiny64._attn_impl = old
    # transformers' eager attention takes its softmax in float32 (~4e-6 here); a wrong mask is off by >1e-3.
    np.testing.assert_allclose(got, want, rtol=0, atol=2e-5)
