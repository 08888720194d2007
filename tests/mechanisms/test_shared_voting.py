"""``rnm`` and ``poe`` classify through one shared path (``_icl.classify_by_units``): the
exemplars are split by a permutation drawn from the generator first, then the mechanism's
release draws its noise from the same generator. No model: a deterministic scoring double."""

from __future__ import annotations

import zlib

import numpy as np
import pytest

from app.icl.partition import partition_exemplars
from app.mechanisms import MechanismParamError, get_mechanism
from app.mechanisms._icl import unit_label_probs

LABELS = ("sports", "world", "tech")
EXEMPLARS = [(f"exemplar text {i}", LABELS[i % 3]) for i in range(12)]
QUERY = "which section is this?"


class ScoringDouble:
    """Label log-probabilities that are a fixed function of the prompt text."""

    def __init__(self) -> None:
        self.batches: list[int] = []

    def continuation_logprobs(self, prompts, continuations):
        self.batches.append(len(prompts))
        rows = [np.random.default_rng(zlib.crc32(p.encode())).dirichlet(np.ones(len(continuations))) for p in prompts]
        return np.log(np.asarray(rows))


@pytest.mark.parametrize(
    "name, params, count, per_unit, units_kw",
    [
        ("rnm", {"epsilon": 1.0}, 12, 1, "partitions"),
        ("rnm", {"epsilon": 2.0, "noise": "laplace", "partitions": 5, "shots_per_partition": 2}, 5, 2, "partitions"),
        ("rnm", {"epsilon": 1.0, "noise": "gumbel", "shots_per_partition": 3}, 4, 3, "partitions"),
        ("poe", {"epsilon": 1.0}, 12, 1, "experts"),
        ("poe", {"epsilon": 4.0, "group_size": 3, "experts": 3, "calibrate": True}, 3, 3, "experts"),
    ],
)
@pytest.mark.parametrize("seed", [0, 7])
def test_classify_is_partition_then_release(name, params, count, per_unit, units_kw, seed):
    mech = get_mechanism(name)
    lm = ScoringDouble()
    res = mech.classify(lm, EXEMPLARS, QUERY, LABELS, None, params, np.random.default_rng(seed))
    assert len(lm.batches) == 1  # one batched call for every unit (content-free prompts included)

    g = np.random.default_rng(seed)
    units = partition_exemplars(len(EXEMPLARS), count, per_unit, g)
    p = mech.parse_params(params)
    probs = unit_label_probs(ScoringDouble(), EXEMPLARS, units, QUERY, LABELS, None, calibrate=p.calibrate)
    ref = mech.release(probs, LABELS, params, len(EXEMPLARS), g, **{units_kw: units})
    assert res.to_dict() == ref.to_dict()
    assert res.internals[units_kw] == [list(map(int, u)) for u in units]


@pytest.mark.parametrize("name", ["rnm", "poe"])
def test_shared_path_validates_before_any_model_call(name):
    mech = get_mechanism(name)
    lm = ScoringDouble()
    with pytest.raises(MechanismParamError) as bad_labels:
        mech.classify(lm, EXEMPLARS, QUERY, ["only"], None, None, np.random.default_rng(0))
    assert bad_labels.value.param == "labels"
    with pytest.raises(MechanismParamError) as bad_query:
        mech.classify(lm, EXEMPLARS, "  ", LABELS, None, None, np.random.default_rng(0))
    assert bad_query.value.param == "query"
    assert lm.batches == []


@pytest.mark.parametrize("calibrate", [False, True])
@pytest.mark.parametrize("seed", [0, 3])
def test_the_units_prompts_are_the_ones_app_icl_builds(calibrate, seed):
    """unit_label_probs builds the units' prompts from the pairs they use (not converting all n first):
    the same prompt texts, hence the same scores, as app.icl.partition_label_distribution."""
    from app.icl.scoring import partition_label_distribution
    from app.icl.templates import get_template

    units = partition_exemplars(len(EXEMPLARS), 4, 3, np.random.default_rng(seed))
    a, b = ScoringDouble(), ScoringDouble()
    got = unit_label_probs(a, EXEMPLARS, units, QUERY, LABELS, None, calibrate=calibrate)
    ref = partition_label_distribution(b, EXEMPLARS, units, QUERY, LABELS, template=get_template(None),
                                       calibrate=calibrate)
    assert np.array_equal(got, ref) and a.batches == b.batches
