"""benchmarks/ci_sequential_compare.py (the fixed-vs-sequential comparison behind docs/audit.md's tables)."""

from __future__ import annotations


def test_the_compare_benchmarks_probe_runs_on_a_black_box_simulation():
    """benchmarks/ci_sequential_compare.py hands the probe builder the simulation inside the black-box view
    (it was handed the wrapper, so its "+probe" rows of simulated targets ran without the probe)."""
    from app.audit import SimulatedVotingTarget, resolve_query, rnm_noise
    from benchmarks.ci_sequential_compare import CANARY, EXEMPLARS, N, BlackBox, _params, _seq

    attack = resolve_query("input_output", CANARY, ["weather", "music"], EXEMPLARS, None)
    nz = rnm_noise(_params(1.0, 5), N).with_bug({"noise_multiplier": 1e-12})
    sim = BlackBox(SimulatedVotingTarget([1.0, 4.0], [0.0, 5.0], nz))
    with_probe = _seq(sim, attack, 1.0, 5, 0, True)
    without = _seq(sim, attack, 1.0, 5, 0, False)
    assert with_probe[0] == without[0] == "violation"
    assert with_probe[1] < without[1] // 2  # one prompt per probe trial: a gross violation in a few pairs
    assert "probe" in with_probe[2]
