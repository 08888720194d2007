"""Exemplar text never leaves (issue 26, docs/security.md "What never leaves"), on SQLite and PostgreSQL.

One real server (uvicorn thread, both bundled models, in-process job runner, open mode). We register
a classification set and a generation set whose exemplar inputs and outputs carry a marker, drive
every endpoint and every audit kind that reads a registered set (private answers, chat completions,
the ``iclinf`` classification and decoding audits, ``synthesize``; success and failure paths), then
search every response body, job, artifact, /ui page, /metrics and the server's log (the root logger
and ``sqlalchemy.engine`` at DEBUG: statements, parameters, rows) for the marker.

The marker is planted in each exemplar with a per-exemplar suffix, so no DP mechanism may release it
as a population property: the mechanisms used here release labels (rnm), public zero-shot candidates
(esa), keywords only after a propose-test-release at epsilon 1 (ksa), or tokens from the public top-k
(synthesize). Class labels are declared metadata and may appear; they carry no marker.

Before issue 26 this test failed on the iclinf decoding label (the most frequent exemplar output,
copied into ``result.models[0].decoding[0].label``) and on its batch-size error message.
"""

from __future__ import annotations

import json
import logging
import time

import httpx
import pytest

from tests.conftest import LiveServer, free_port, server_settings

MARK = "QZVLEAK5821"  # in every exemplar input and output (each with its own suffix)
LABELS = ["lights", "music"]
T = 120


class _Capture(logging.Handler):
    """Every record, formatted with its traceback, as the server would write it."""

    def __init__(self) -> None:
        super().__init__(level=logging.DEBUG)
        self.lines: list[str] = []
        self.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.lines.append(self.format(record))
        except Exception as exc:  # noqa: BLE001 - a record that cannot format is still evidence
            self.lines.append(f"unformattable record {record.name}: {record.msg!r} {record.args!r} ({exc})")


@pytest.fixture(scope="module")
def captured_server(database_url, lm, embedder):
    """(base URL, log capture). Logging at DEBUG before the server starts, restored afterwards."""
    from app.api.main import create_app
    from app.runtime import Runtime

    cap = _Capture()
    root, sa = logging.getLogger(), logging.getLogger("sqlalchemy.engine")
    before = (root.level, sa.level)
    root.addHandler(cap)
    root.setLevel(logging.DEBUG)
    sa.setLevel(logging.DEBUG)
    settings = server_settings(database_url, job_runner="inprocess", job_poll_seconds=0.1, job_concurrency=2,
                               auth_mode="open")
    rt = Runtime.create(settings, models={lm.name: lm, embedder.name: embedder})
    srv = LiveServer(create_app(settings, runtime=rt), free_port())
    try:
        srv.start()
        yield srv.url, cap
    finally:
        srv.stop()
        rt.close()
        root.removeHandler(cap)
        root.setLevel(before[0])
        sa.setLevel(before[1])


@pytest.fixture(autouse=True)
def _one_torch_thread():
    import torch

    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


class Seen:
    """Every body the server sent back, with where it came from."""

    def __init__(self, client: httpx.Client) -> None:
        self.c = client
        self.bodies: list[tuple[str, str]] = []

    def __call__(self, method: str, url: str, expect: int | tuple[int, ...] | None = None, **kw) -> httpx.Response:
        r = self.c.request(method, url, **kw)
        self.bodies.append((f"{method} {url} -> {r.status_code}", r.content.decode("utf-8", errors="replace")
                            + " " + " ".join(f"{k}: {v}" for k, v in r.headers.items())))
        if expect is not None:
            want = expect if isinstance(expect, tuple) else (expect,)
            assert r.status_code in want, f"{method} {url}: {r.status_code} {r.text[:500]}"
        return r


def _classification_set(call: Seen) -> str:
    texts = ["turn the lamp on", "switch off the kitchen light", "dim the bedroom lights", "lights off now",
             "play some jazz", "skip this song", "turn the music up", "put on a playlist"]
    body = {"name": "leak-classification", "task": "classification", "labels": LABELS,
            "budget": {"epsilon": 10.0, "delta": 1e-3},
            "exemplars": [{"input": f"{MARK}in{i} {t}", "output": LABELS[i // 4]} for i, t in enumerate(texts)]}
    return call("POST", "/v1/datasets", 201, json=body).json()["id"]


def _generation_set(call: Seen) -> str:
    """JSONL upload; exemplars 2k and 2k+1 share an output (the iclinf decoding label needs two)."""
    meta = {"name": "leak-generation", "task": "generation", "budget": {"epsilon": 50.0, "delta": 1e-3}}
    rows = [{"input": f"#{MARK}in{i}: A asks B about the weather on day {i}.",
             "output": f"{MARK}out{i // 2} weather chat {i // 2}"} for i in range(8)]
    raw = "\n".join(json.dumps(x) for x in [meta, *rows]) + "\n"
    return call("POST", "/v1/datasets", 201, content=raw.encode(),
                headers={"Content-Type": "application/x-ndjson"}).json()["id"]


def _refused_uploads(call: Seen) -> None:
    ex = [{"input": f"{MARK}bad input", "output": f"{MARK}bad output"}]
    # An output that is not a declared label; an unknown field; an empty input; a bad JSONL line; 415.
    call("POST", "/v1/datasets", 422, json={"name": "x", "labels": LABELS, "exemplars": ex})
    call("POST", "/v1/datasets", 422, json={"name": "x", "labels": LABELS,
                                            "exemplars": [{**ex[0], "note": f"{MARK}value"}]})
    call("POST", "/v1/datasets", 422, json={"name": "x", "task": "generation",
                                            "exemplars": [{"input": " ", "output": f"{MARK}o"}]})
    call("POST", "/v1/datasets", 422, json={"name": "x", "task": "generation",
                                            "exemplars": [{"input": f"{MARK}i" * 2000, "output": "o"}]})
    call("POST", "/v1/datasets", 422, content=(json.dumps({"name": "x", "task": "generation"}) + "\n"
                                               + '{"input": "' + MARK + ' unterminated\n').encode(),
         headers={"Content-Type": "application/x-ndjson"})
    call("POST", "/v1/datasets", 422, content=(json.dumps({"name": "x", "task": "generation"}) + "\n"
                                               + json.dumps({"input": MARK, "output": 7}) + "\n").encode(),
         headers={"Content-Type": "application/x-ndjson"})
    call("POST", "/v1/datasets", 415, content=f"{MARK} as text".encode(), headers={"Content-Type": "text/plain"})
    # A NUL: PostgreSQL refuses it in the INSERT (a failed insert whose exception and log once carried
    # the whole batch as "[parameters: ...]"); the boundary check answers 422 where it is in place.
    # Which status is not this test's business (tests/api/test_bad_text.py); what leaves is.
    # (Connection: close: after a 500 the server drops the connection, which a kept-alive client reuses.)
    call("POST", "/v1/datasets", (201, 422, 500), headers={"Connection": "close"}, json={
        "name": "x", "task": "generation", "exemplars": [{"input": f"{MARK}nul\u0000 input", "output": f"{MARK}nul"}]})


def _answers(call: Seen, cls: str, gen: str) -> None:
    common = {"epsilon": 1.0, "delta": 1e-5, "seed": 1, "return_internals": True}
    call("POST", "/v1/private/classify", 200, json={"dataset_id": cls, "query": "lamp off please", "mechanism": "rnm",
                                                    "partitions": 2, "shots_per_partition": 2, **common})
    call("POST", "/v1/private/classify", 200, json={"dataset_id": cls, "query": "lamp off please", "mechanism": "rnm",
                                                    "partitions": 2, "shots_per_partition": 2, **common})  # reused
    call("POST", "/v1/private/classify", 422, json={"dataset_id": cls, "query": "q", "mechanism": "rnm",
                                                    "partitions": 8, "shots_per_partition": 2, **common})
    call("POST", "/v1/private/classify", 422, json={"dataset_id": gen, "query": "q", **common})
    call("POST", "/v1/private/classify", 429, json={"dataset_id": cls, "query": "q", "partitions": 2,
                                                    "shots_per_partition": 2, **common, "epsilon": 20.0})
    for mech, params in (("esa", {"partitions": 2, "candidates": 2}), ("ksa", {"partitions": 2})):
        call("POST", "/v1/private/generate", 200, json={"dataset_id": gen, "query": "Summarize: A and B talk.",
                                                        "mechanism": mech, "max_tokens": 3, "params": params, **common})
    call("POST", "/v1/private/generate", 422, json={"dataset_id": cls, "query": "q", "max_tokens": 2, **common})
    call("POST", "/v1/private/generate", 422, json={"dataset_id": gen, "query": "q", "max_tokens": 2,
                                                    "params": {"partitions": 40}, **common})
    call("POST", "/v1/chat/completions", 200, json={
        "model": "smollm2-135m-instruct", "messages": [{"role": "user", "content": "lamp off please"}],
        "dataset_id": cls, "mechanism": "rnm", "epsilon": 1.0, "partitions": 2, "shots_per_partition": 2, "seed": 2})
    for ds in (cls, gen):
        call("GET", f"/v1/datasets/{ds}", 200)
        call("GET", f"/v1/datasets/{ds}/exemplars", 403)
        call("GET", f"/v1/datasets/{ds}/budget", 200)
        call("GET", f"/v1/datasets/{ds}/ledger", 200)
        call("GET", f"/v1/datasets/{ds}/budget/forecast", (200, 404, 422))
        call("PATCH", f"/v1/datasets/{ds}", 200, json={"answer_reuse": True})
    call("GET", "/v1/datasets", 200)


def _audits(call: Seen, cls: str, gen: str) -> tuple[list[str], str]:
    """Submit every audit that reads a registered set; returns (job ids, the synthesize job id)."""
    dec = {"batch_size": 2, "sequences": 1, "max_tokens": 2, "targets": [1.0]}
    configs = [
        # Success: decoding on the generation set (its "label" is a private output).
        {"kind": "iclinf", "config": {"dataset": {"source": "registered", "id": gen}, "decoding": dec}},
        # Failure: too few exemplars of the label for the batch (the error once quoted the output).
        {"kind": "iclinf", "config": {"dataset": {"source": "registered", "id": gen},
                                      "decoding": {**dec, "batch_size": 20}}},
        # Failure: classification ICLInf on a generation set.
        {"kind": "iclinf", "config": {"dataset": {"source": "registered", "id": gen},
                                      "classification": {"n_shots": [1], "m": 1}}},
        # Success: classification and decoding on the classification set.
        {"kind": "iclinf", "config": {"dataset": {"source": "registered", "id": cls},
                                      "classification": {"n_shots": [1], "m": 1}, "decoding": {**dec, "max_tokens": 1}}},
        # Failure at run time: more held-out queries than the set has.
        {"kind": "iclinf", "config": {"dataset": {"source": "registered", "id": cls},
                                      "classification": {"n_shots": [1], "m": 50}}},
    ]
    ids = [call("POST", "/v1/audits", 202, json=c).json()["id"] for c in configs]
    syn = call("POST", "/v1/audits", 202, json={"kind": "synthesize", "config": {
        "dataset_id": cls, "epsilon": 4.0, "delta": 1e-5, "shots_per_label": 1, "max_tokens": 2, "partitions": 2,
        "seed": 5}}).json()["id"]
    # Refused at submission: a generation set, a budget that cannot pay, a missing set.
    call("POST", "/v1/audits", 422, json={"kind": "synthesize", "config": {
        "dataset_id": gen, "epsilon": 1.0, "delta": 1e-5, "shots_per_label": 1}})
    call("POST", "/v1/audits", 429, json={"kind": "synthesize", "config": {
        "dataset_id": cls, "epsilon": 15.0, "delta": 1e-5, "shots_per_label": 1, "max_tokens": 2, "partitions": 2}})
    call("POST", "/v1/audits", 404, json={"kind": "synthesize", "config": {  # an unknown referenced set: 404
        "dataset_id": "ds_missing", "epsilon": 1.0, "delta": 1e-5, "shots_per_label": 1}})
    return ids + [syn], syn


def _wait(call: Seen, ids: list[str], timeout: float = 300) -> dict[str, dict]:
    deadline, done = time.time() + timeout, {}
    while len(done) < len(ids):
        assert time.time() < deadline, f"jobs did not finish: {set(ids) - set(done)}"
        for j in ids:
            if j not in done:
                job = call.c.get(f"/v1/audits/{j}").json()
                if job["status"] in ("succeeded", "failed", "cancelled"):
                    done[j] = job
        time.sleep(0.2)
    return done


def _around(text: str, width: int = 60) -> str:
    """The text around the marker (case-insensitive: ksa lower-cases keywords), or ''."""
    i = text.lower().find(MARK.lower())
    return "" if i < 0 else text[max(0, i - width):i + len(MARK) + width].replace("\n", " ")


def _url(u: str) -> str:
    return u if u.startswith("/") else "/" + u.split("://", 1)[1].split("/", 1)[1]


def test_no_exemplar_text_leaves(captured_server):
    base, cap = captured_server
    start = len(cap.lines)
    with httpx.Client(base_url=base, timeout=T) as c:
        call = Seen(c)
        cls, gen = _classification_set(call), _generation_set(call)
        _refused_uploads(call)
        _answers(call, cls, gen)
        ids, syn = _audits(call, cls, gen)
        jobs = _wait(call, ids)
        assert [jobs[j]["status"] for j in ids] == ["succeeded", "failed", "failed", "succeeded", "failed",
                                                    "succeeded"], {j: (x["status"], x.get("error")) for j, x in jobs.items()}
        # Every job, its artifacts (raw bytes: CSV, JSON and PNG), the lists, the /ui pages.
        call("GET", "/v1/audits?limit=100", 200)
        call("GET", "/v1/audits?kind=iclinf", 200)
        for j in ids:
            job = call("GET", f"/v1/audits/{j}", 200).json()
            call("POST", f"/v1/audits/{j}/cancel", 409)
            arts = call("GET", f"/v1/audits/{j}/artifacts", 200).json()["data"]
            for a in arts:
                call("GET", _url(a["url"]), 200)
                call("GET", f"/ui/audits/{j}/artifacts/{a['name']}", 200)
            call("GET", f"/ui/audits/{j}", 200)
            if job["status"] == "succeeded" and job["kind"] == "iclinf":
                assert {"result.json", "decoding.csv", "config.json"} <= {a["name"] for a in arts}
        new_set = jobs[syn]["result"]["dataset_id"]
        call("GET", f"/v1/datasets/{new_set}/exemplars", 200)  # public DP text, readable in full
        for page in ("/ui", "/ui/audits", "/ui/audits/new", "/ui/datasets", f"/ui/datasets/{cls}",
                     f"/ui/datasets/{gen}"):
            call("GET", page, 200, follow_redirects=True)
        call("GET", f"/ui/datasets/{new_set}", (200, 404))  # a public set has no budget page
        call("GET", "/metrics", 200)
        call("GET", "/v1/health", (200, 503))
    time.sleep(0.3)  # the last access-log lines
    log = cap.lines[start:]

    # The capture works: it holds the statements that stored the exemplars (parameters hidden).
    assert any("INSERT INTO exemplar" in line for line in log), "the server log was not captured"
    assert len(call.bodies) > 60
    leaks = [f"{where}: ...{hit}..." for where, text in call.bodies if (hit := _around(text))]
    leaks += [f"log: ...{hit}..." for line in log if (hit := _around(line))]
    assert not leaks, f"exemplar text left the server in {len(leaks)} places:\n" + "\n".join(leaks[:20])
    # A generation output is named by exemplar index; a declared class label by its text.
    (cell,) = jobs[ids[0]]["result"]["models"][0]["decoding"]
    assert "label" not in cell and cell["label_exemplar"] in range(8) and cell["label_exemplars"] == 2
    assert "the output of exemplar" in jobs[ids[1]]["error"]["message"]
    (cell,) = jobs[ids[3]]["result"]["models"][0]["decoding"]
    assert cell["label"] in LABELS and "label_exemplar" not in cell
