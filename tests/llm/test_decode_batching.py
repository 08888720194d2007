"""Decode steps of concurrent sessions merged into one forward pass (scheduler + app.llm.step_merge.run_steps):
every row's logits equal the same session stepped alone, whatever the other sessions' lengths; rows and
positions never mix; a session keeps stepping alone (or dropping rows) after a merged step."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from app.llm import step_merge
from app.llm.tenancy import tenant_scope

from .conftest import chat_prompt, prefix_reuse, reference_next_logprobs
from .test_logprobs import ATOL

# Sessions of different shapes: 1 row short, 3 rows sharing a chat header (holes after the shared
# prefix), 2 rows of plain text of different lengths.
SHORT = [["Hi"], None, ["One two three four five six seven eight nine ten eleven twelve", "The capital of France is"]]


def _session_prompts(lm, header_prompts):
    return [SHORT[0], header_prompts[:3], SHORT[2]]


def _tokens(step: int, n: int, j: int) -> list[int]:
    """Arbitrary but distinct tokens per session, row and step: the sessions must follow them."""
    return [100 + 997 * step + 131 * i + 7919 * j for i in range(n)]


def _log_softmax(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    m = x.max(axis=-1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=-1, keepdims=True))


def _alone(lm, prompts, steps):
    """Logits of each session stepped by itself (shared_steps off), per step."""
    out = []
    for j, ps in enumerate(prompts):
        s = lm.start_decode(ps, reuse_prefix=True)
        s._shared = False
        seq = [s.logits]
        for k in range(steps):
            seq.append(s.step(_tokens(k, s.size, j)))
        out.append(seq)
        s.close()
    return out


def test_merged_steps_equal_steps_alone(lm, header_prompts):
    prompts = _session_prompts(lm, header_prompts)
    steps = 4
    with prefix_reuse(lm, True):
        ref = _alone(lm, prompts, steps)
    with prefix_reuse(lm, True):
        sessions = [lm.start_decode(ps) for ps in prompts]
    lengths0 = [s.lengths for s in sessions]
    kvs = [s._kv for s in sessions]
    assert len({kv.physical_length for kv in kvs}) == 3  # really different cache lengths
    merged0 = lm.stats.merged_steps
    for k in range(steps):
        toks = [_tokens(k, s.size, j) for j, s in enumerate(sessions)]
        # the step runner, as the scheduler calls it with every queued step at once
        outs = step_merge.run_steps(lm, [(s._kv, t) for s, t in zip(sessions, toks)])
        for j, (s, o) in enumerate(zip(sessions, outs)):
            assert not isinstance(o, BaseException), o
            s._logits_t = o
            for r, t in zip(s._rows, toks[j]):
                s._tokens[r].append(t)
            np.testing.assert_allclose(s.logits, ref[j][k + 1], rtol=0, atol=ATOL, err_msg=f"session {j} step {k}")
    assert lm.stats.merged_steps - merged0 == steps  # one forward pass per step for all three sessions
    for j, s in enumerate(sessions):
        assert s.lengths == [n + steps for n in lengths0[j]]
        # after merged steps the caches carry no padding: physical length = the session's own
        assert s._kv.physical_length == kvs[j].physical_length
    # keep stepping alone, and dropping rows, after merged steps: positions still exact
    s = sessions[1]
    s.keep([2, 0])
    rows = [s.token_ids(2), s.token_ids(0)]
    got = s.step([42, 43])
    for i, (row, t) in enumerate(zip(rows, [42, 43])):
        np.testing.assert_allclose(_log_softmax(got[i]), reference_next_logprobs(lm, row + [t]), atol=ATOL)
    for s in sessions:
        s.close()


def test_step_groups_respect_the_cost_budget(lm, header_prompts):
    with prefix_reuse(lm, False):
        sessions = [lm.start_decode(ps) for ps in _session_prompts(lm, header_prompts)]
    kvs = [s._kv for s in sessions]
    old = lm.merge_step_tokens
    try:
        lm.merge_step_tokens = 0
        assert sorted(len(g) for g in step_merge.step_groups(lm, kvs)) == [1, 1, 1]
        lm.merge_step_tokens = 1 << 20
        groups = step_merge.step_groups(lm, kvs)
        assert sorted(i for g in groups for i in g) == [0, 1, 2]
        for g in groups:  # padding never more than doubles a merged group's cache
            t = max(kvs[i].physical_length for i in g) + 1
            assert sum(kvs[i].n for i in g) * t <= 2 * sum(kvs[i].n * (kvs[i].physical_length + 1) for i in g)
        short = sorted(range(3), key=lambda i: kvs[i].physical_length)[:2]
        lm.merge_step_tokens = sum(kvs[i].n for i in short) * (max(kvs[i].physical_length for i in short) + 1)
        assert [g for g in step_merge.step_groups(lm, kvs) if len(g) > 1] in ([short], [])
    finally:
        lm.merge_step_tokens = old
    for s in sessions:
        s.close()


def test_cost_rule_on_measured_shapes(lm):
    """The default rule on shapes measured on the 2-core CPU (docs/models.md#decode-batching)."""
    from types import SimpleNamespace

    def kvs(k, n, t):
        return [SimpleNamespace(n=n, physical_length=t) for _ in range(k)]

    assert lm.merge_step_tokens == 3072
    assert step_merge.step_groups(lm, kvs(2, 8, 400)) == [[0], [1]]  # 0.85x merged: stepped apart
    assert [len(g) for g in step_merge.step_groups(lm, kvs(8, 4, 200))] == [8]  # 2.0x merged
    assert [len(g) for g in step_merge.step_groups(lm, kvs(16, 1, 128))] == [16]  # 5.1x merged
    # padding never more than doubles the cache: a long session does not join short ones
    assert sorted(map(len, step_merge.step_groups(lm, kvs(3, 1, 10) + kvs(1, 1, 300)))) == [1, 3]


@pytest.mark.parametrize("tenants", [("acme",) * 3, ("acme", "globex", "acme")])
def test_concurrent_sessions_from_threads_equal_sequential(lm, header_prompts, tenants):
    """Sessions of different prompt lengths step at once from threads (a barrier per step, so their
    steps queue together); every step's logits equal the sequential run's."""
    prompts = _session_prompts(lm, header_prompts)
    steps = 5
    with prefix_reuse(lm, True):
        ref = _alone(lm, prompts, steps)
    got: list = [None] * len(prompts)
    errors: list = []
    barrier = threading.Barrier(len(prompts))
    batches: list = []
    run = lm.scheduler._run_steps

    def spy(items):
        batches.append(len(items))
        return run(items)

    def worker(j):
        try:
            with tenant_scope(tenants[j]):
                s = lm.start_decode(prompts[j])
            seq = [s.logits]
            for k in range(steps):
                barrier.wait(60)
                seq.append(s.step(_tokens(k, s.size, j)))  # outside the scope: the session keeps its tenant
            s.close()
            got[j] = seq
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)
            barrier.abort()

    lm.scheduler._run_steps = spy
    merged0 = lm.stats.merged_steps
    try:
        with prefix_reuse(lm, True):
            threads = [threading.Thread(target=worker, args=(j,)) for j in range(len(prompts))]
            for t in threads:
                t.start()
            for t in threads:
                t.join(120)
    finally:
        lm.scheduler._run_steps = run
    if errors:
        raise errors[0]
    for j in range(len(prompts)):
        for k in range(steps + 1):
            np.testing.assert_allclose(got[j][k], ref[j][k], rtol=0, atol=ATOL, err_msg=f"session {j} step {k}")
    assert sum(batches) == steps * len(prompts)
    if len(set(tenants)) == 1:
        assert lm.stats.merged_steps > merged0 and max(batches) >= 2  # steps did share forward passes
    else:
        # globex's session never shares a batch with acme's
        assert max(batches) <= 2


def test_public_row_session_steps_alone(lm):
    """A session that reads no cached prefix (private decoding's public row) never joins a merged step."""
    s = lm.start_decode(["Hello there"], reuse_prefix=False)
    assert s._shared is False
    merged0, calls = lm.stats.merged_steps, lm.stats.forward_calls
    s.step(11)
    assert lm.stats.merged_steps == merged0 and lm.stats.forward_calls == calls + 1
    s.close()


def test_decode_with_scheduler_off_steps_in_the_callers_thread(lm):
    from dataclasses import replace

    old = lm.scheduler.opts
    lm.scheduler.opts = replace(old, enabled=False)
    try:
        s = lm.start_decode([chat_prompt(lm, "Name a colour.")])
        seen = []
        orig = lm._step_alone

        def spy(kv, tokens):
            seen.append(threading.current_thread())
            return orig(kv, tokens)

        lm._step_alone = spy
        try:
            s.step(11)
        finally:
            del lm._step_alone
        assert seen == [threading.current_thread()]
        s.close()
    finally:
        lm.scheduler.opts = old


def test_a_thread_holding_the_model_lock_steps_itself(lm):
    s = lm.start_decode(["Hello there"])
    with lm._lock:  # the worker would block on this lock: the step must not queue
        done = threading.Event()
        t = threading.Thread(target=lambda: (s.step(11), done.set()))
        s.step(12)
        assert s.lengths == [len(lm.tokenize("Hello there")) + 1]
        t.start()  # another thread's step queues and waits for the lock
        assert not done.wait(0.5)
    assert done.wait(60)
    assert s.lengths == [len(lm.tokenize("Hello there")) + 2]
    s.close()
