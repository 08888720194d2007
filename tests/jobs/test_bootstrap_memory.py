"""A canary_mia bootstrap cannot ask for more memory than the server has: n_sample x labels is bounded
(app.audit.bootstrap.MAX_BOOTSTRAP_CELLS), a 422 at submit where the config holds the label count.

Before: n_sample (<= 4,000,000) and the simulated target's vote vectors (any length) were each bounded, their
product not; the draws take ~46 bytes per cell at peak (measured +919 MiB for 2e7 cells), so 4,000,000 draws of
1,000 labels asked for ~180 GB and the OOM killer would end the server running the job, every tenant's requests
with it (the in-process runner). Submitted only here (the server runs no jobs). SQLite and PostgreSQL.
"""

from __future__ import annotations

import httpx
import numpy as np
import pytest

from app.audit.noise import rnm_noise

CELLS = 2**26  # app.audit.bootstrap.MAX_BOOTSTRAP_CELLS

def _cfg(labels: int, n_sample: int, mode: str = "bootstrap") -> dict:
    return {"kind": "canary_mia", "config": {"mode": mode, "n_sample": n_sample, "target": {
        "type": "simulated", "params": {"epsilon": 1.0, "delta": 1e-5, "partitions": 4},
        "votes_with": [1.0, 3.0] + [0.0] * (labels - 2), "votes_without": [0.0, 4.0] + [0.0] * (labels - 2)}}}


def test_an_oversized_bootstrap_is_refused_at_submit(live_server):
    r = httpx.post(f"{live_server}/v1/audits", json=_cfg(100, 4_000_000), timeout=60)
    assert r.status_code == 422, r.text[:300]  # before: 202, a job that needs ~18 GB
    err = r.json()["error"]
    assert err["param"] == "config.n_sample" and str(CELLS) in err["message"], err
    r = httpx.post(f"{live_server}/v1/audits", json=_cfg(1000, 40_000), timeout=60)
    assert r.status_code == 422 and r.json()["error"]["param"].startswith("config.target.votes_with"), r.text[:300]


def test_a_bootstrap_within_the_bound_is_accepted(live_server):
    r = httpx.post(f"{live_server}/v1/audits", json=_cfg(14, 4_000_000), timeout=60)
    assert r.status_code == 202, r.text[:300]
    httpx.post(f"{live_server}/v1/audits/{r.json()['id']}/cancel", timeout=60)


def test_the_library_refuses_too():
    from app.audit.bootstrap import MAX_BOOTSTRAP_CELLS, bootstrap_audit

    assert MAX_BOOTSTRAP_CELLS == CELLS
    vw, vo = np.array([[1.0, 3.0, 0.0]]), np.array([[0.0, 4.0, 0.0]])
    with pytest.raises(ValueError, match="n_sample"):
        bootstrap_audit(vw, vo, rnm_noise({"epsilon": 1.0, "delta": 1e-5, "partitions": 4}, 8), 0, 1,
                        rng=np.random.default_rng(0), n_sample=MAX_BOOTSTRAP_CELLS // 3 + 1)
