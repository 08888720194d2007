"""The bundled sample tasks as private datasets: GET /v1/samples, POST /v1/samples/{name}/load, the SDK's
load_sample and `dpicl datasets load-sample`, on a real server with the bundled SmolLM2 (both databases)."""

from __future__ import annotations

import httpx
import pytest
from typer.testing import CliRunner

from app.cli import cli
from app.client import Client, NotFound
from app.icl.samples import load_sample, sample_names


def test_list_and_load_samples_then_answer_on_them(live_server):
    listed = httpx.get(f"{live_server}/v1/samples", timeout=60).json()["data"]
    assert [s["name"] for s in listed] == sample_names() == ["assistant_intents", "gen_dialogsum", "support_intents"]
    by_name = {s["name"]: s for s in listed}
    assert by_name["assistant_intents"]["exemplar_count"] == 400 and by_name["gen_dialogsum"]["task"] == "generation"

    r = httpx.post(f"{live_server}/v1/samples/assistant_intents/load", json={"budget": {"epsilon": 4, "delta": 1e-5}},
                   timeout=60)
    assert r.status_code == 201, r.text
    ds = r.json()
    assert ds["exemplar_count"] == 400 and ds["labels"] == ["weather", "music", "alarm", "lights", "shopping"]
    assert ds["budget"]["epsilon"] == 4 and ds["name"] == "assistant_intents"
    sample = load_sample("assistant_intents")
    assert not any(text in r.text for text, _ in sample.exemplars[:50])  # write-only: no exemplar text back
    # The docs' partitions=8 examples now have the exemplars they need.
    a = httpx.post(f"{live_server}/v1/private/classify", timeout=180, json={
        "dataset_id": ds["id"], "query": sample.example_queries[0], "mechanism": "rnm", "epsilon": 1.0,
        "delta": 1e-5, "partitions": 8, "shots_per_partition": 4})
    assert a.status_code == 200 and a.json()["label"] in ds["labels"], a.text

    missing = httpx.post(f"{live_server}/v1/samples/no_such_task/load", timeout=60)
    assert missing.status_code == 404 and missing.json()["error"]["param"] == "name"
    bad = httpx.post(f"{live_server}/v1/samples/gen_dialogsum/load", json={"budget": {"epsilon": -1, "delta": 1e-5}},
                     timeout=60)
    assert bad.status_code == 422 and bad.json()["error"]["param"] == "budget.epsilon"


def test_sdk_and_cli_load_a_sample(live_server):
    with Client(live_server) as dp:
        ds = dp.load_sample("gen_dialogsum", name="dialogues")
        assert ds["task"] == "generation" and ds["name"] == "dialogues" and ds["exemplar_count"] == 240
        with pytest.raises(NotFound):
            dp.load_sample("nope")
    out = CliRunner().invoke(cli, ["datasets", "load-sample", "support_intents", "--server", live_server,
                                   "--budget-epsilon", "2"])
    assert out.exit_code == 0, out.output
    assert out.output.startswith("ds_") and "400 exemplars" in out.output and "epsilon 2.0" in out.output
    listing = CliRunner().invoke(cli, ["datasets", "samples", "--server", live_server])
    assert listing.exit_code == 0 and "assistant_intents" in listing.output
    bad = CliRunner().invoke(cli, ["datasets", "load-sample", "nope", "--server", live_server])
    assert bad.exit_code == 2 and "unknown sample" in bad.output
