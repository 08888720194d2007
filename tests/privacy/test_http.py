"""POST /v1/privacy/* on a real server: same numbers and keys as the library and the CLI; 422s name the field."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from app.cli.privacy import privacy_app
from app.privacy import gdp_epsilon, service


@pytest.fixture(scope="module")
def client(database_url):
    """The privacy math needs no model: a real server with none configured (starts in a second,
    and proves /v1/privacy/* never touches a model)."""
    from tests.conftest import running_app, server_settings

    settings = server_settings(database_url, models=[], load_models=False)
    with running_app(settings, models={}, timeout=30) as c:
        assert c.get("/v1/models").json()["data"] == []
        yield c


CAL = dict(mechanism="clip-softmax", solve_for="temperature", target_epsilon=4.0, delta=1e-5, clip=10.0,
           batch_size=50, compositions=2000, orders="2-99")


def _cli_json(args):
    res = CliRunner().invoke(privacy_app, [*args, "--json"])
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


def test_calibrate_same_as_library_and_cli(client):
    r = client.post("/v1/privacy/calibrate", json=CAL)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body == service.calibrate(**CAL)
    cli = _cli_json(["calibrate", "--mechanism", "clip-softmax", "--solve-for", "temperature", "--target-epsilon", "4",
                     "--delta", "1e-5", "--clip", "10", "--batch-size", "50", "--compositions", "2000",
                     "--orders", "2-99"])
    assert cli == body  # same keys, same numbers
    assert {"temperature", "alpha", "epsilon", "delta"} <= set(body) and body["epsilon"] <= 4.0


def test_calibrate_gaussian_and_list_orders(client):
    r = client.post("/v1/privacy/calibrate", json=dict(mechanism="gaussian", solve_for="sigma", target_epsilon=1.0,
                                                       delta=1e-5, sensitivity=2**0.5, method="rdp",
                                                       orders=[2, 3, 4.5, 8, 16, 32]))
    assert r.status_code == 200, r.text
    b = r.json()
    assert b["sigma"] > 5.2759 and b["alpha"] in (2, 3, 4.5, 8, 16, 32) and b["epsilon"] <= 1.0


def test_convert_and_empirical(client):
    r = client.post("/v1/privacy/convert", json={"mu": 1.0, "delta": 1e-5})
    assert r.status_code == 200 and r.json()["epsilon"] == pytest.approx(gdp_epsilon(1.0, 1e-5))
    assert r.json() == _cli_json(["convert", "--mu", "1", "--delta", "1e-5"])
    r = client.post("/v1/privacy/empirical", json={"tp": 500, "fn": 0, "fp": 0, "tn": 500, "confidence": 0.99})
    assert r.status_code == 200 and r.json()["epsilon"] == pytest.approx(4.5419, abs=5e-5)
    assert r.json()["rigorous"] == {"epsilon": True, "epsilon_point": False, "gdp_mu_lower": True, "epsilon_gdp": False}
    assert r.json() == _cli_json(["empirical", "--tp", "500", "--fn", "0", "--fp", "0", "--tn", "500",
                                  "--confidence", "0.99"])


@pytest.mark.parametrize(
    "path,body,param",
    [
        ("calibrate", {**CAL, "target_epsilon": 0}, "target_epsilon"),
        ("calibrate", {**CAL, "target_epsilon": -2}, "target_epsilon"),
        ("calibrate", {**CAL, "delta": 1.0}, "delta"),
        ("calibrate", {**CAL, "delta": 0}, "delta"),
        ("calibrate", {**CAL, "orders": ""}, "orders"),
        ("calibrate", {**CAL, "orders": []}, "orders"),
        ("calibrate", {**CAL, "orders": [0.5, 2]}, "orders"),
        ("calibrate", {**CAL, "compositions": None}, "compositions"),
        ("calibrate", {**CAL, "upper": 0.01}, "target_epsilon"),
        ("calibrate", {**CAL, "clip": None}, "clip"),
        ("calibrate", {**CAL, "temprature": 1.0}, "temprature"),
        ("convert", {"rho": 0.5, "mu": 1.0, "delta": 1e-5}, "source"),
        ("convert", {"rdp": [0.1, 0.2], "orders": [2], "delta": 1e-5}, "rdp"),
        ("convert", {"pure_epsilon": 1.0, "adjacency": "replace-one", "to_adjacency": "add-remove", "delta": 1e-5},
         "to_adjacency"),
        ("empirical", {"tp": 5, "fn": 0, "fp": 0, "tn": 5, "trials": 11}, "trials"),
        ("empirical", {"tp": 0, "fn": 0, "fp": 0, "tn": 5}, "tp"),
        ("empirical", {"tp": -1, "fn": 0, "fp": 0, "tn": 5}, "tp"),
        ("empirical", {"correct": 11, "trials": 10}, "correct"),
    ],
)
def test_bad_input_is_422_naming_the_field(client, path, body, param):
    r = client.post(f"/v1/privacy/{path}", json=body)
    assert r.status_code == 422, r.text
    err = r.json()["error"]
    assert err["param"] == param and err["type"] == "invalid_request_error" and err["message"]


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity"])
def test_non_finite_numbers_are_422(client, literal):
    raw = json.dumps({**CAL, "target_epsilon": 1.0}).replace('"target_epsilon": 1.0', f'"target_epsilon": {literal}')
    r = client.post("/v1/privacy/calibrate", content=raw, headers={"content-type": "application/json"})
    assert r.status_code == 422 and r.json()["error"]["param"] == "target_epsilon"
