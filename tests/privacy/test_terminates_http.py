"""Tiny epsilon and delta on every endpoint that calibrates noise (issue 26, item 1): each answers a
4xx naming the field, or a correct answer, promptly; on the old solvers these requests never
returned (brentq's absolute xtol far above the root, then an unbounded clean-up walk).

Real server (uvicorn, SQLite and PostgreSQL, the bundled models). Refusals happen before any model
work, so they must come back fast; the bound below is generous for a loaded 2-core machine."""

from __future__ import annotations

import time

import httpx
import pytest

from app.privacy._validate import MIN_EPSILON
from tests.answers.test_gateway_api import EXEMPLARS, LABELS

FAST = 5.0  # seconds: a refusal or a privacy-math answer (the old code never answered at all)
T = 180.0  # httpx timeout for model-backed answers on a loaded machine; a hang fails instead of blocking

# (epsilon, delta): the repros and the ends of the domain.
REPROS = [(1e-17, 1e-300), (1e-17, 1e-17), (1e-10, 1e-100), (5e-324, 1e-5), (1e-300, 1e-5), (5e-324, 5e-324)]


@pytest.fixture(scope="module")
def datasets(live_server):
    def make(body):
        r = httpx.post(f"{live_server}/v1/datasets", json=body, timeout=T)
        assert r.status_code == 201, r.text
        return r.json()["id"]

    budget = {"epsilon": 1e6, "delta": 0.5}
    cls = make({"name": "tiny-eps", "labels": LABELS, "budget": budget,
                "exemplars": [{"input": i, "output": o} for i, o in EXEMPLARS]})
    gen = make({"name": "tiny-eps-gen", "task": "generation", "budget": budget,
                "template": {"instruction": "Summarize.", "input_prefix": "Text:", "output_prefix": "Summary:"},
                "exemplars": [{"input": f"Ann meets Bo on day {i}.", "output": f"Ann and Bo meet ({i})."}
                              for i in range(6)]})
    return {"classification": cls, "generation": gen}


def _requests(ds: dict, eps: float, delta: float) -> list[tuple[str, dict]]:
    cls, gen = ds["classification"], ds["generation"]
    rnm = {"mechanism": "rnm", "partitions": 2, "shots_per_partition": 2, "params": {"noise": "gaussian"}}
    return [
        ("/v1/privacy/calibrate", {"mechanism": "gaussian", "solve_for": "sigma", "target_epsilon": eps, "delta": delta}),
        ("/v1/privacy/calibrate", {"mechanism": "gaussian", "solve_for": "sigma", "target_epsilon": eps, "delta": delta,
                                   "method": "classical"}),
        ("/v1/privacy/calibrate", {"mechanism": "clip-softmax", "solve_for": "temperature", "target_epsilon": eps,
                                   "delta": delta, "clip": 1.0, "batch_size": 4, "compositions": 10}),
        ("/v1/privacy/convert", {"epsilon": eps, "delta": delta, "to": "mu"}),
        ("/v1/privacy/convert", {"epsilon": eps, "delta": delta, "to": "rho"}),
        ("/v1/private/classify", {"dataset_id": cls, "query": "Rain all day.", "epsilon": eps, "delta": delta, **rnm}),
        ("/v1/chat/completions", {"model": "smollm2-135m-instruct", "messages": [{"role": "user", "content": "Rain?"}],
                                  "dataset_id": cls, "epsilon": eps, "delta": delta, "mechanism": "rnm",
                                  "partitions": 2, "shots_per_partition": 2, "dp_params": {"noise": "gaussian"}}),
        *[("/v1/private/generate", {"dataset_id": gen, "query": "Cy meets Di.", "mechanism": m, "epsilon": eps,
                                    "delta": delta, "max_tokens": 1, "params": {"partitions": 2, "shots_per_partition": 1}})
          for m in ("esa", "ksa")],
    ]


@pytest.mark.parametrize("eps, delta", REPROS)
def test_tiny_epsilon_and_delta_answer_promptly(live_server, datasets, eps, delta):
    for path, body in _requests(datasets, eps, delta):
        t0 = time.monotonic()
        r = httpx.post(f"{live_server}{path}", json=body, timeout=T)
        took = time.monotonic() - t0
        where = f"{path} {body.get('mechanism')} eps={eps:g} delta={delta:g}: {r.status_code} {r.text[:300]}"
        if eps < MIN_EPSILON:
            # One refusal for every mechanism: 422 naming the epsilon field, saying why.
            assert r.status_code == 422, where
            err = r.json()["error"]
            assert err["param"] in ("epsilon", "target_epsilon"), where
            assert f"must be >= {MIN_EPSILON:g}" in err["message"], where
            assert took < FAST, where
            continue
        # Above the floor: a correct answer (or a 4xx for a reason of the mechanism's own).
        assert r.status_code == 200 or 400 <= r.status_code < 500 and r.status_code != 429, where
        if path.startswith("/v1/privacy/"):
            assert took < FAST, where
        if r.status_code == 200 and path == "/v1/privacy/calibrate":
            b = r.json()
            assert b["epsilon"] is not None and 0.0 <= b["epsilon"] <= eps, where
            param = b["solve_for"].replace("-", "_")
            assert b[param] is not None and b[param] > 0, where
        if r.status_code == 200 and path == "/v1/privacy/convert" and body["to"] == "mu":
            assert r.json()["mu"] > 0, where
        if r.status_code == 200 and path.startswith("/v1/private/"):
            p = r.json()["privacy"]
            assert 0.0 <= p["epsilon"] <= eps * (1 + 1e-9), where
