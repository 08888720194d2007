"""The library against the real bundled model (SmolLM2-135M-Instruct, the session fixture ``lm``)."""

import numpy as np
import pytest

from app.icl import (
    ICLPrompt,
    icl,
    label_distribution,
    load_bundled,
    partition_exemplars,
    partition_label_distribution,
    score_labels,
    zero_shot,
)
from app.icl.evaluate import compare

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module", autouse=True)
def one_torch_thread():
    """One intra-op thread while this module runs, restored after.

    On the shared 2-core test machine (load 10+), two torch threads spin against
    each other: a 300-token forward pass measured 30 s with 2 threads vs 7 s with 1.
    """
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def task():
    return load_bundled()


def test_label_words_are_single_tokens(lm, task):
    # each continuation " weather", ... is one token, and the prompt's last
    # token does not merge with it (tokenize(prompt + label) = tokens + [label])
    prompt = task.template.render_raw([], "Will it rain tomorrow?", task.labels)
    base = lm.tokenize(prompt)
    for cont in task.template.continuations(task.labels):
        ids = lm.tokenize(cont)
        assert len(ids) == 1, (cont, ids)
        assert lm.tokenize(prompt + cont) == base + ids


def test_real_scores_sum_to_one_and_batching_is_exact(lm, task):
    ex = task.exemplars()[:4]
    prompts = [ICLPrompt.of(ex, task.test[0].input), ICLPrompt.of([], task.test[1].input)]
    p = label_distribution(lm, prompts, task.labels, template=task.template)
    assert p.shape == (2, 5)
    np.testing.assert_allclose(p.sum(axis=1), 1.0, atol=1e-9)
    one = label_distribution(lm, prompts[:1], task.labels, template=task.template)
    np.testing.assert_allclose(one[0], p[0], atol=1e-4)  # batched == one at a time (float32 rounding)


def test_calibration_on_the_real_model(lm, task):
    ex = task.exemplars()[:4]
    # The content-free input itself is mapped to uniform (Zhao et al. Sec. 5; ICLInf App. B) ...
    cf = label_distribution(lm, [ICLPrompt.of(ex, "N/A")], task.labels, calibrate=True, template=task.template,
                            content_free=("N/A",), eps=0.0)
    np.testing.assert_allclose(cf[0], 0.2, atol=1e-6)
    # ... and a real query's scores change by exactly W p / sum(W p), W = diag((p_cf + eps)^-1).
    sc = score_labels(lm, [ICLPrompt.of(ex, task.test[0].input)], task.labels, template=task.template, calibrate=True)
    w = sc.uncalibrated[0] / (sc.content_free[0] + 1e-6)
    np.testing.assert_allclose(sc.probs[0], w / w.sum(), rtol=1e-9)
    assert np.abs(sc.probs - sc.uncalibrated).max() > 1e-3


def test_partitions_and_baselines_on_the_real_model(lm, task):
    rng = np.random.default_rng(0)
    ex = task.exemplars()[:12]
    parts = partition_exemplars(len(ex), 3, 2, rng)
    p = partition_label_distribution(lm, ex, parts, task.test[0].input, task.labels, task.template)
    assert p.shape == (3, 5)
    np.testing.assert_allclose(p.sum(axis=1), 1.0, atol=1e-9)
    z = zero_shot(lm, task.test[0].input, task.labels, task.template)
    r = icl(lm, ex[:4], task.test[0].input, task.labels, task.template)
    assert z.label in task.labels and r.label in task.labels
    np.testing.assert_allclose(sum(r.distribution.values()), 1.0, atol=1e-9)
    assert r.prompt.count("Request: ") == 5 and z.prompt.count("Request: ") == 1


def test_icl_beats_zero_shot_on_the_bundled_task(lm, task):
    """Exemplars help on the bundled task: 8-shot ICL vs zero-shot, same 60 test queries, same template.

    Paired design (``app.icl.evaluate.compare``, seed 0): 60 queries in 3 groups, each group with its
    own 8 random demonstrations. Measured with 100 queries (docs/icl.md): zero-shot 0.24, ICL 0.63.
    Pass: the difference is at least 0.15 and an exact one-sided McNemar (sign) test on the
    discordant pairs rejects "exemplars do not help" at 5%.
    What the exemplars fix is mostly the label bias (docs/icl.md): calibrated zero-shot does as well.
    """
    from scipy.stats import binomtest

    zs, ic = compare(lm, task, shots=8, queries=60, contexts=3, seed=0)
    n = zs.n
    b = sum(i and not z for i, z in zip(ic.correct_mask, zs.correct_mask))  # ICL right, zero-shot wrong
    c = sum(z and not i for i, z in zip(ic.correct_mask, zs.correct_mask))  # zero-shot right, ICL wrong
    p_value = binomtest(b, b + c, 0.5, alternative="greater").pvalue if b + c else 1.0
    diff = ic.accuracy - zs.accuracy
    msg = (f"zero-shot {zs.accuracy:.3f} ({zs.correct}/{n}, predicted {zs.predicted_counts}); "
           f"ICL 8-shot {ic.accuracy:.3f} ({ic.correct}/{n}, predicted {ic.predicted_counts}); "
           f"difference {diff:.3f}, discordant {b} vs {c}, McNemar p = {p_value:.4f}")
    print(msg)
    assert diff >= 0.15 and p_value < 0.05, msg
    assert ic.accuracy >= 0.4, msg  # twice chance (0.2) for five balanced labels
