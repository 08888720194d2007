"""Private exemplar sets over real HTTP on both databases; exemplar text never comes back out."""

import json
import logging

import httpx
import pytest

MARKER = "ZQX-PRIVATE-7731"  # planted in every exemplar; must never appear in any response


def _payload(n=12, **over):
    labels = ["sports", "weather", "food", "tech"]
    body = {
        "name": "tickets",
        "task": "classification",
        "labels": labels,
        "exemplars": [{"input": f"{MARKER} record {i} about {labels[i % 4]}", "output": labels[i % 4]} for i in range(n)],
    }
    body.update(over)
    return body


def _no_marker(r: httpx.Response):
    assert MARKER not in r.text


def test_create_get_list_delete(live_server):
    r = httpx.post(f"{live_server}/v1/datasets", json=_payload())
    assert r.status_code == 201, r.text
    _no_marker(r)
    ds = r.json()
    assert ds["id"].startswith("ds_") and ds["exemplar_count"] == 12
    assert ds["label_counts"] == {"sports": 3, "weather": 3, "food": 3, "tech": 3}
    assert ds["template"]["output_prefix"]  # a default template was filled in
    got = httpx.get(f"{live_server}/v1/datasets/{ds['id']}")
    assert got.status_code == 200 and got.json() == ds
    _no_marker(got)
    lst = httpx.get(f"{live_server}/v1/datasets", params={"limit": 200})
    assert ds["id"] in [d["id"] for d in lst.json()["data"]]
    _no_marker(lst)
    d = httpx.delete(f"{live_server}/v1/datasets/{ds['id']}")
    assert d.status_code == 200 and d.json()["deleted"] is True
    assert httpx.get(f"{live_server}/v1/datasets/{ds['id']}").status_code == 404
    assert httpx.delete(f"{live_server}/v1/datasets/{ds['id']}").status_code == 404


def test_jsonl_upload(live_server):
    p = _payload(n=30)
    meta = {k: v for k, v in p.items() if k != "exemplars"}
    meta["template"] = {"instruction": "Topic?", "input_prefix": "Q:", "output_prefix": "A:"}
    body = "\n".join([json.dumps(meta)] + [json.dumps(e) for e in p["exemplars"]]) + "\n"
    r = httpx.post(f"{live_server}/v1/datasets", content=body.encode(), headers={"content-type": "application/x-ndjson"})
    assert r.status_code == 201, r.text
    assert r.json()["exemplar_count"] == 30
    assert r.json()["template"] == {"instruction": "Topic?", "input_prefix": "Q:", "output_prefix": "A:"}
    _no_marker(r)


@pytest.mark.parametrize(
    "mutate, param",
    [
        (lambda b: b["exemplars"][5].update(output=f"{MARKER} bogus"), "exemplars.5.output"),
        (lambda b: b["exemplars"][3].update(input="   "), "exemplars.3.input"),
        (lambda b: b["exemplars"][2].pop("output"), "exemplars.2.output"),
        (lambda b: b.update(labels=["a"]), "labels"),
        (lambda b: b.update(labels=["a", "a"]), "labels"),
        # the same text in two Unicode forms (U+00E9 and e + U+0301 render alike): two labels that look one
        (lambda b: b.update(labels=["caf\u00e9", "cafe\u0301"]), "labels"),
        (lambda b: b.pop("labels"), "labels"),
        (lambda b: b.update(task="translation"), "task"),
        (lambda b: b.update(exemplars=[]), "exemplars"),
        (lambda b: b.update(name=""), "name"),
    ],
)
def test_bad_input_is_422_naming_the_field(live_server, mutate, param):
    body = _payload()
    mutate(body)
    r = httpx.post(f"{live_server}/v1/datasets", json=body)
    assert r.status_code == 422, r.text
    assert r.json()["error"]["param"] == param
    _no_marker(r)


def test_jsonl_bad_line_names_the_exemplar(live_server):
    meta = {"name": "x", "labels": ["a", "b"]}
    lines = [json.dumps(meta), json.dumps({"input": f"{MARKER} ok", "output": "a"}), "{not json " + MARKER]
    r = httpx.post(f"{live_server}/v1/datasets", content="\n".join(lines), headers={"content-type": "application/x-ndjson"})
    assert r.status_code == 422 and r.json()["error"]["param"] == "exemplars.1"
    _no_marker(r)


def test_unsupported_content_type(live_server):
    r = httpx.post(f"{live_server}/v1/datasets", content=b"a,b", headers={"content-type": "text/csv"})
    assert r.status_code == 415 and r.json()["error"]["param"] == "content-type"


def test_pagination_bounds_are_422(live_server):
    r = httpx.get(f"{live_server}/v1/datasets", params={"limit": 0})
    assert r.status_code == 422 and r.json()["error"]["param"] == "limit"


def test_survives_restart(database_url, lm, embedder):
    """Stored in SQL: a new server process on the same database still has the set."""
    from app.api.main import create_app
    from app.runtime import Runtime
    from tests.conftest import LiveServer, free_port, server_settings

    settings = server_settings(database_url)
    # Laplace RNM is pure DP: each answer costs epsilon 1 by basic composition (a hair less by PLD).
    answer = {"query": "Is it raining?", "mechanism": "rnm", "epsilon": 1.0, "partitions": 2,
              "shots_per_partition": 2, "params": {"noise": "laplace"}}
    seen: dict = {}
    for round_ in range(2):
        rt = Runtime.create(settings, models={lm.name: lm, embedder.name: embedder})
        srv = LiveServer(create_app(settings, runtime=rt), free_port())
        srv.start()
        try:
            if round_ == 0:
                ds = httpx.post(f"{srv.url}/v1/datasets", json=_payload()).json()
                r = httpx.post(f"{srv.url}/v1/private/classify", json={"dataset_id": ds["id"], **answer}, timeout=180)
                assert r.status_code == 200, r.text
                seen = {"ds": httpx.get(f"{srv.url}/v1/datasets/{ds['id']}").json(),
                        "budget": httpx.get(f"{srv.url}/v1/datasets/{ds['id']}/budget").json()}
                assert seen["budget"]["charges"] == 1
            else:
                ds_id = seen["ds"]["id"]
                again = httpx.get(f"{srv.url}/v1/datasets/{ds_id}")
                assert again.status_code == 200 and again.json() == seen["ds"]  # same metadata, counts, labels
                assert httpx.get(f"{srv.url}/v1/datasets/{ds_id}/budget").json() == seen["budget"]  # spend kept
                # The released answer outlives the restart: the same request is reused at no cost ...
                r = httpx.post(f"{srv.url}/v1/private/classify", json={"dataset_id": ds_id, **answer}, timeout=180)
                assert r.status_code == 200 and r.json().get("reused") is True, r.text
                assert httpx.get(f"{srv.url}/v1/datasets/{ds_id}/budget").json()["charges"] == 1
                # ... and a new question is charged on top of the stored charge.
                r = httpx.post(f"{srv.url}/v1/private/classify",
                               json={"dataset_id": ds_id, **answer, "query": "Will it snow tomorrow?"}, timeout=180)
                assert r.status_code == 200, r.text
                budget = httpx.get(f"{srv.url}/v1/datasets/{ds_id}/budget").json()
                assert budget["charges"] == 2 and budget["epsilon_spent"] == pytest.approx(2.0, rel=1e-4)
        finally:
            srv.stop()
            rt.close()


def test_no_exemplar_text_in_logs(live_server, caplog):
    caplog.set_level(logging.DEBUG)
    httpx.post(f"{live_server}/v1/datasets", json=_payload())
    bad = _payload()
    bad["exemplars"][0]["output"] = "nope"
    httpx.post(f"{live_server}/v1/datasets", json=bad)
    assert MARKER not in caplog.text
