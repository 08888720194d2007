"""Load and soak test (issue 15, item 6): mixed traffic against real processes, with kill -9 in the middle.

    python benchmarks/bench_soak.py                              # 20 min, 32 clients, PostgreSQL, 2 workers
    python benchmarks/bench_soak.py --minutes 4.5 --clients 16 --out var/soak
    python benchmarks/bench_soak.py --db sqlite --workers 0 --minutes 0.2 --clients 4 --no-kills   # smoke

What runs: a fresh PostgreSQL database on 127.0.0.1:5432 (dropped afterwards unless --keep-db), one
``dpicl serve`` (the bundled SmolLM2 only) and ``--workers`` ``dpicl worker`` processes (procrastinate
runner, no models: the audit kinds used need none), all real subprocesses. ``--clients`` asyncio clients
(one httpx connection pool each) loop over a weighted mix with exponential think time:

- ``POST /v1/private/classify`` (``rnm``, epsilon 1, 2 partitions x 2 shots, on the client's own dataset),
  always with an ``Idempotency-Key``; a transport error or 5xx is retried with the *same* key, so an answer
  charged before a crash comes back as a replay (``Idempotent-Replayed: true``), never as a second charge;
- ``POST /v1/datasets`` (8 exemplars, 2 labels, a large budget so that no answer is refused);
- ``POST /v1/audits`` (``sleep`` jobs of 2 s and tiny ``canary_mia`` audits of a simulated target), keyed;
- reads: ``GET /v1/datasets/{id}/budget``, ``/ledger``, ``GET /v1/audits/{id}``.

At 40 % of the run one worker gets SIGKILL (restarted 1 s later); at 60 % the server gets SIGKILL (restarted
at once, on the same port). Afterwards the script checks, through the API and SQL:

- **ledger = answers**: every key that received a 200 answer has exactly one ``charged`` ledger entry, on
  its dataset, with the epsilon the answer stated; every charged entry belongs to a key that received an
  answer, except keys whose request was in flight at a kill and never got one (none should remain: the
  client retries with the same key; any left are replayed here and reported); each dataset's budget counts
  its entries (``charges``);
- **no stuck job**: every audit job reaches succeeded/failed/cancelled within ``--drain-seconds`` after the
  traffic stops (the stall timeout is set to 10 s so a killed worker's job is re-queued quickly), and no
  procrastinate job is left ``todo``/``doing``.

Reported: requests and errors by operation and status code (``transport`` = no HTTP answer: the kills),
p50/p95 latency per minute (client side, includes the clients' own event loop on the same machine), RSS of
the server and each worker per minute (from /proc, per process incarnation) and RSS growth per
incarnation from its first to its last minute. Output: a markdown table on stdout, ``summary.json`` and
``soak.md`` under ``--out``. Exit status 1 when a check fails.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.dpicl_server import free_port  # noqa: E402

PG_ADMIN_URL = os.environ.get("DPICL_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")
LM = "smollm2-135m-instruct"
LABELS = ["billing", "shipping"]
EXEMPLARS = [
    {"input": "I was charged twice for one order", "output": "billing"},
    {"input": "Where is my parcel?", "output": "shipping"},
    {"input": "The invoice shows the wrong amount", "output": "billing"},
    {"input": "My package has not arrived yet", "output": "shipping"},
    {"input": "Please refund the duplicate payment", "output": "billing"},
    {"input": "The courier left the box at the wrong address", "output": "shipping"},
    {"input": "Why did my card get declined?", "output": "billing"},
    {"input": "Can I change the delivery date?", "output": "shipping"},
]
QUERIES = ["My card was charged two times", "Has my order shipped?", "I need a receipt for last month",
           "The tracking number does not work", "You billed me after I cancelled", "When will the box arrive?"]
CLASSIFY = {"mechanism": "rnm", "epsilon": 1.0, "delta": 1e-6, "partitions": 2, "shots_per_partition": 2}
AUDITS = {
    "sleep": {"steps": 4, "step_seconds": 0.5},
    # A simulated-vote target needs no model; 200 direct trials take well under a second.
    "canary_mia": {"target": {"type": "simulated", "params": {"epsilon": 1.0, "delta": 1e-5, "partitions": 4}},
                   "dataset": {"exemplars": [{"input": f"request number {i}", "output": LABELS[i % 2]}
                                             for i in range(8)], "labels": LABELS, "size": 8},
                   "trials": 200, "power": {"alternatives": ["no_noise"]}, "threat_model": "black-box"},
}
# Operation mix (weights); every client starts by creating its dataset.
MIX = {"classify": 0.45, "budget": 0.15, "ledger": 0.08, "audit_submit": 0.08, "audit_poll": 0.14,
       "dataset_create": 0.04, "list_audits": 0.06}
OK_STATUS = {"classify": (200,), "dataset_create": (201,), "audit_submit": (200, 202)}
TERMINAL = ("succeeded", "failed", "cancelled")


# --------------------------------------------------------------------------------------------- processes



def _rss_mib(pid: int) -> float | None:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        return None
    return None


class Proc:
    """One ``dpicl`` subprocess in a role (server, worker1, ...); its incarnations are numbered."""

    def __init__(self, role: str, args: list[str], env: dict[str, str], log: Path) -> None:
        self.role, self.args, self.env, self.log = role, args, env, log
        self.p: subprocess.Popen | None = None
        self.incarnation = 0
        self.start()

    def start(self) -> None:
        self.incarnation += 1
        fh = open(self.log, "ab")
        self.p = subprocess.Popen([sys.executable, "-m", "app.cli", *self.args], cwd=ROOT, env=self.env,
                                  stdout=fh, stderr=subprocess.STDOUT)
        fh.close()

    @property
    def pid(self) -> int | None:
        return self.p.pid if self.p is not None and self.p.poll() is None else None

    def kill9(self) -> None:
        assert self.p is not None
        os.kill(self.p.pid, signal.SIGKILL)
        self.p.wait(timeout=30)

    def stop(self, timeout: float = 30) -> None:
        if self.p is not None and self.p.poll() is None:
            self.p.terminate()
            try:
                self.p.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.kill9()


def _wait_healthy(url: str, proc: Proc, timeout: float) -> float:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if proc.pid is None:
            raise RuntimeError(f"{proc.role} exited; see {proc.log}")
        try:
            if httpx.get(f"{url}/v1/health", timeout=2).status_code == 200:
                return time.monotonic() - t0
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"{proc.role} did not become healthy in {timeout:g} s; see {proc.log}")


class RssSampler(threading.Thread):
    def __init__(self, procs: list[Proc], t0: float, every: float = 2.0) -> None:
        super().__init__(daemon=True)
        self.procs, self.t0, self.every = procs, t0, every
        self.samples: list[tuple[float, str, int, float]] = []  # (t, role, incarnation, MiB)
        self.halt = threading.Event()

    def run(self) -> None:
        while not self.halt.wait(self.every):
            t = time.monotonic() - self.t0
            for p in self.procs:
                pid = p.pid
                rss = _rss_mib(pid) if pid else None
                if rss is not None:
                    self.samples.append((t, p.role, p.incarnation, rss))


# ----------------------------------------------------------------------------------------------- traffic

@dataclass
class Rec:
    t: float          # start, seconds since the traffic began
    op: str
    status: str       # "200", "503", "transport"
    latency: float    # seconds
    ok: bool


@dataclass
class State:
    t0: float
    end: float
    retry_seconds: float
    recs: list[Rec] = field(default_factory=list)
    answers: dict[str, dict] = field(default_factory=dict)     # key -> what the client received (200)
    attempted: dict[str, dict] = field(default_factory=dict)   # key -> dataset_id, body, errors before
    datasets: list[str] = field(default_factory=list)
    jobs: dict[str, str] = field(default_factory=dict)         # job id -> idempotency key
    events: list[tuple[float, str]] = field(default_factory=list)


async def _send(st: State, c: httpx.AsyncClient, op: str, method: str, path: str, *, retry: bool,
                **kw: Any) -> tuple[httpx.Response | None, int]:
    """One logical request: attempts until an answer that is not 5xx, retrying (same headers, so the same
    Idempotency-Key) transport errors and 5xx for up to ``retry_seconds``. Every attempt is recorded.
    Returns the last response (None: no answer) and the number of attempts that got no answer or a 5xx."""
    deadline = time.monotonic() + st.retry_seconds
    delay = 0.25
    failed = 0
    while True:
        start = time.monotonic()
        r: httpx.Response | None = None
        try:
            r = await c.request(method, path, **kw)
            status = str(r.status_code)
        except httpx.TransportError:
            status = "transport"
        lat = time.monotonic() - start
        ok = r is not None and r.status_code in OK_STATUS.get(op, (200,))
        st.recs.append(Rec(start - st.t0, op, status, lat, ok))
        if r is not None and r.status_code < 500:
            return r, failed
        failed += 1
        if not retry or time.monotonic() + delay > deadline:
            return r, failed
        await asyncio.sleep(delay * (0.5 + random.random()))
        delay = min(delay * 2, 4.0)


async def _create_dataset(st: State, c: httpx.AsyncClient, name: str) -> str | None:
    body = {"name": name, "task": "classification", "labels": LABELS, "exemplars": EXEMPLARS,
            "budget": {"epsilon": 1e6, "delta": 1e-3}}
    # Not deduplicated by the server: a resend after a transport error may leave an unused dataset behind.
    r, _ = await _send(st, c, "dataset_create", "POST", "/v1/datasets", json=body, retry=True)
    if r is not None and r.status_code == 201:
        st.datasets.append(r.json()["id"])
        return r.json()["id"]
    return None


async def _classify(st: State, c: httpx.AsyncClient, ds: str, key: str, body: dict) -> None:
    st.attempted[key] = {"dataset_id": ds, "body": body}
    r, failed = await _send(st, c, "classify", "POST", "/v1/private/classify", json=body,
                            headers={"Idempotency-Key": key}, retry=True)
    st.attempted[key]["failed_attempts"] = failed
    if r is not None and r.status_code == 200:
        a = r.json()
        st.answers[key] = {"dataset_id": ds, "epsilon": a["privacy"]["epsilon"], "label": a["label"],
                           "replayed": r.headers.get("Idempotent-Replayed") == "true", "failed_attempts": failed,
                           # an identical earlier request's released answer, at no cost (answer reuse)
                           "reused": bool(a.get("reused"))}


async def client_loop(n: int, st: State, url: str, think: float, audit_kinds: list[str]) -> None:
    rng = random.Random(n)
    ops, weights = list(MIX), list(MIX.values())
    async with httpx.AsyncClient(base_url=url, timeout=120) as c:
        ds = None
        while ds is None and time.monotonic() < st.end:
            ds = await _create_dataset(st, c, f"soak-{n}-0")
        my_jobs: list[str] = []
        i = 0
        while time.monotonic() < st.end:
            i += 1
            op = rng.choices(ops, weights)[0]
            if op == "classify" and ds:
                body = {"dataset_id": ds, "query": rng.choice(QUERIES), **CLASSIFY}
                await _classify(st, c, ds, f"soak-{n}-{i}-{uuid.uuid4().hex[:8]}", body)
            elif op == "dataset_create":
                ds = await _create_dataset(st, c, f"soak-{n}-{i}") or ds
            elif op == "budget" and ds:
                await _send(st, c, op, "GET", f"/v1/datasets/{ds}/budget", retry=True)
            elif op == "ledger" and ds:
                await _send(st, c, op, "GET", f"/v1/datasets/{ds}/ledger", params={"limit": 50}, retry=True)
            elif op == "audit_submit":
                kind = audit_kinds[i % len(audit_kinds)]
                key = f"soak-job-{n}-{i}"
                r, _ = await _send(st, c, op, "POST", "/v1/audits", retry=True,
                                json={"kind": kind, "config": AUDITS[kind], "claimed_epsilon": 1.0},
                                headers={"Idempotency-Key": key})
                if r is not None and r.status_code in (200, 202):
                    st.jobs[r.json()["id"]] = key
                    my_jobs.append(r.json()["id"])
            elif op == "audit_poll" and my_jobs:
                await _send(st, c, op, "GET", f"/v1/audits/{rng.choice(my_jobs[-5:])}", retry=True)
            elif op == "list_audits":
                await _send(st, c, op, "GET", "/v1/audits", params={"limit": 10}, retry=True)
            await asyncio.sleep(rng.expovariate(1.0 / think) if think > 0 else 0)


async def chaos(st: State, cluster: "Cluster", kill_at: list[tuple[float, str]]) -> None:
    for at, what in kill_at:
        await asyncio.sleep(max(0.0, st.t0 + at - time.monotonic()))
        t = time.monotonic() - st.t0
        if what == "worker":
            # Kill a worker in the middle of a job (waiting up to 60 s for one to be running), so that
            # the reaper has something to re-queue; else the first worker.
            victim, running = cluster.workers[0], []
            for _ in range(120):
                busy = [(w, j) for w in cluster.workers
                        for j in [await asyncio.to_thread(cluster.running_jobs_of, f"soak-{w.role}")] if j]
                if busy:
                    victim, running = busy[0]
                    break
                await asyncio.sleep(0.5)
            victim.kill9()
            t = time.monotonic() - st.t0
            st.events.append((t, f"kill -9 {victim.role} (running jobs: {len(running)})"))
            await asyncio.sleep(1.0)
            victim.start()
            st.events.append((time.monotonic() - st.t0, f"{victim.role} restarted"))
        else:
            cluster.server.kill9()
            st.events.append((t, "kill -9 server"))
            cluster.server.start()
            took = await asyncio.to_thread(_wait_healthy, cluster.url, cluster.server, 300)
            st.events.append((time.monotonic() - st.t0, f"server healthy again ({took:.1f} s after restart)"))


# ------------------------------------------------------------------------------------------------ checks

def check_ledger(answers: dict[str, dict], attempted: dict[str, dict], entries: list[dict],
                 budgets: dict[str, dict] | None = None) -> dict[str, Any]:
    """Ledger = answers. ``answers``: key -> {dataset_id, epsilon} of every 200 a client received;
    ``attempted``: key -> {dataset_id} of every private request sent (an answer marked ``reused`` is an
    identical earlier request's released answer and must carry no charge of its own); ``entries``: the ledger entries of all
    datasets (each with ``dataset_id``); ``budgets``: dataset id -> its budget object (``charges``).

    ok when every answered key has exactly one charged entry on its dataset with the answer's epsilon, and
    every charged entry is an answered key's — or a key sent but never answered (in flight at a kill),
    which is reported under ``charged_in_flight`` (not a failure: the answer can be fetched by replaying
    the key), while a charge for a key never sent, or with no key, is ``unexplained_charges``."""
    by_key: dict[str | None, list[dict]] = defaultdict(list)
    for e in entries:
        if e.get("status") == "charged":
            by_key[e.get("idempotency_key")].append(e)
    missing, double, mismatch, reused_charged = [], [], [], []
    reused = [key for key, a in answers.items() if a.get("reused")]
    for key, a in answers.items():
        es = by_key.get(key, [])
        if a.get("reused"):  # re-released at zero cost: must not be charged under its own key
            if es:
                reused_charged.append(key)
            continue
        if not es:
            missing.append(key)
            continue
        if len(es) > 1:
            double.append(key)
        e = es[0]
        if e["dataset_id"] != a["dataset_id"] or abs(float(e["epsilon"]) - float(a["epsilon"])) > 1e-9:
            mismatch.append(key)
    in_flight, unexplained = [], []
    for key, es in by_key.items():
        if key in answers:
            continue
        if key is not None and key in attempted:
            in_flight.append(key)
        else:
            unexplained.extend([key] * len(es))
    refunded_answered = [e.get("idempotency_key") for e in entries
                         if e.get("status") != "charged" and e.get("idempotency_key") in answers]
    budget_mismatch = []
    if budgets is not None:
        per_ds = Counter(e["dataset_id"] for e in entries if e.get("status") == "charged")
        budget_mismatch = [ds for ds, b in budgets.items() if int(b.get("charges", -1)) != per_ds.get(ds, 0)]
    return {
        "answers": len(answers), "requests_sent": len(attempted), "reused_answers": len(reused),
        "reused_but_charged": reused_charged,
        "charged_entries": sum(len(v) for v in by_key.values()),
        "answered_without_charge": missing, "charged_twice": double, "entry_differs_from_answer": mismatch,
        "charged_in_flight": sorted(in_flight), "unexplained_charges": unexplained,
        "answered_but_refunded": refunded_answered, "budget_charges_mismatch": budget_mismatch,
        "ok": not (missing or double or mismatch or unexplained or refunded_answered or budget_mismatch
                   or reused_charged),
    }


def _collect_ledger(url: str) -> tuple[list[dict], dict[str, dict]]:
    entries: list[dict] = []
    budgets: dict[str, dict] = {}
    with httpx.Client(base_url=url, timeout=60) as c:
        offset = 0
        while True:
            page = c.get("/v1/datasets", params={"limit": 200, "offset": offset}).json()
            for d in page["data"]:
                budgets[d["id"]] = d["budget"]
            offset += len(page["data"])
            if not page["data"] or offset >= page["total"]:
                break
        for ds in budgets:
            off = 0
            while True:
                page = c.get(f"/v1/datasets/{ds}/ledger", params={"limit": 500, "offset": off}).json()
                entries.extend({**e, "dataset_id": ds} for e in page["data"])
                off += len(page["data"])
                if not page["data"] or off >= page["total"]:
                    break
    return entries, budgets


def replay_in_flight(url: str, st: State, keys: list[str]) -> dict[str, Any]:
    """Keys charged but never answered: the same request with the same key must return the stored answer."""
    out = {"replayed": 0, "failed": []}
    with httpx.Client(base_url=url, timeout=120) as c:
        for key in keys:
            r = c.post("/v1/private/classify", json=st.attempted[key]["body"], headers={"Idempotency-Key": key})
            if r.status_code == 200 and r.headers.get("Idempotent-Replayed") == "true":
                out["replayed"] += 1
            else:
                out["failed"].append(f"{key}: HTTP {r.status_code}")
    return out


def drain_jobs(url: str, st: State, timeout: float) -> dict[str, Any]:
    """Wait until no audit job is queued or running; report final statuses and the stragglers."""
    t0 = time.monotonic()

    def all_jobs(c: httpx.Client) -> list[dict]:
        jobs, after = [], None
        while True:
            page = c.get("/v1/audits", params={"limit": 100, **({"after": after} if after else {})}).json()
            jobs.extend(page["data"])
            if not page["has_more"]:
                return jobs
            after = page["last_id"]

    with httpx.Client(base_url=url, timeout=60) as c:
        while True:
            jobs = all_jobs(c)
            open_ = [j for j in jobs if j["status"] not in TERMINAL]
            if not open_ or time.monotonic() - t0 > timeout:
                break
            time.sleep(1.0)
    seen = {j["id"] for j in jobs}
    return {
        "jobs": len(jobs), "by_status": dict(Counter(j["status"] for j in jobs)),
        "by_kind": dict(Counter(j["kind"] for j in jobs)),
        "retried_after_a_crash": sum(1 for j in jobs if j.get("attempts", 1) > 1),
        "errors": dict(Counter((j.get("error") or {}).get("code") for j in jobs if j["status"] == "failed")),
        "verdicts": dict(Counter(str(j.get("verdict")) for j in jobs if j["status"] == "succeeded")),
        "stuck": [f"{j['id']} {j['status']}" for j in jobs if j["status"] not in TERMINAL],
        "submitted_but_missing": [k for k in st.jobs if k not in seen],
        "drain_seconds": round(time.monotonic() - t0, 1), "bound_seconds": timeout,
    }


class Cluster:
    def __init__(self, db: str, workers: int, tmp: Path, server_models: str) -> None:
        self.tmp = tmp
        self.admin = None
        if db == "postgres":
            import psycopg
            from sqlalchemy.engine import make_url

            self.dbname = f"dpicl_soak_{time.strftime('%Y%m%d_%H%M%S')}_{uuid.uuid4().hex[:6]}"
            with psycopg.connect(PG_ADMIN_URL, autocommit=True, connect_timeout=5) as conn:
                conn.execute(f'CREATE DATABASE "{self.dbname}"')
            self.admin = PG_ADMIN_URL
            self.db_url = make_url(PG_ADMIN_URL).set(database=self.dbname).render_as_string(hide_password=False)
        else:
            self.dbname = str(tmp / "soak.db")
            self.db_url = f"sqlite:///{self.dbname}"
        base = dict(os.environ)
        base.update(DPICL_DATABASE_URL=self.db_url, DPICL_JOB_TEST_KINDS="true", DPICL_AUTH_MODE="open",
                    DPICL_LOG_LEVEL="warning", DPICL_JOB_HEARTBEAT_SECONDS="1", DPICL_JOB_STALL_SECONDS="10",
                    DPICL_JOB_POLL_SECONDS="0.5", DPICL_ARTIFACTS_DIR=str(tmp / "artifacts"),
                    OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"),
                    MKL_NUM_THREADS=os.environ.get("MKL_NUM_THREADS", "1"), PYTHONUNBUFFERED="1")
        if db == "sqlite":
            base.update(DPICL_JOB_RUNNER="inprocess", DPICL_JOB_CONCURRENCY="2")
        else:
            base.update(DPICL_JOB_RUNNER="procrastinate", DPICL_JOB_CONCURRENCY="1")
        server_env = {**base, "DPICL_MODELS": server_models}
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        self.server = Proc("server", ["serve", "--port", str(port)], server_env, tmp / "server.log")
        self.startup_s = _wait_healthy(self.url, self.server, 600)
        worker_env = {**base, "DPICL_LOAD_MODELS": "false"}  # sleep and simulated canary_mia need no model
        self.workers = [Proc(f"worker{i + 1}", ["worker", "--name", f"soak-worker{i + 1}"], worker_env,
                             tmp / f"worker{i + 1}.log") for i in range(workers)]

    @property
    def procs(self) -> list[Proc]:
        return [self.server, *self.workers]

    def _sql(self, query: str, *args: Any) -> list[tuple]:
        if self.admin is None:
            return []
        import psycopg

        with psycopg.connect(self.db_url, autocommit=True, connect_timeout=5) as conn:
            return list(conn.execute(query, args).fetchall())

    def running_jobs_of(self, worker_prefix: str) -> list[str]:
        return [r[0] for r in self._sql("SELECT id FROM audit_jobs WHERE status = 'running' AND worker_id LIKE %s",
                                        worker_prefix + "%")]

    def queue_state(self) -> dict[str, int]:
        try:
            return {s: n for s, n in self._sql("SELECT status::text, count(*) FROM procrastinate_jobs GROUP BY 1")}
        except Exception as exc:  # the table's name belongs to procrastinate
            return {"unreadable": 1, "error": str(exc)[:200]}  # type: ignore[dict-item]

    def close(self, keep_db: bool) -> None:
        for p in self.procs:
            p.stop()
        if self.admin is not None and not keep_db:
            import psycopg

            with psycopg.connect(self.admin, autocommit=True, connect_timeout=5) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{self.dbname}" WITH (FORCE)')


# ------------------------------------------------------------------------------------------------ report

def _pct(xs: list[float], q: float) -> float | None:
    if not xs:
        return None
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


def _ms(x: float | None) -> float | None:
    return None if x is None else round(x * 1000, 1)


def per_minute(recs: list[Rec], rss: list[tuple[float, str, int, float]], roles: list[str],
               events: list[tuple[float, str]]) -> list[dict]:
    n = int(max([r.t for r in recs] + [s[0] for s in rss] + [0.0]) // 60) + 1
    rows = []
    for m in range(n):
        rs = [r for r in recs if m * 60 <= r.t < (m + 1) * 60]
        answered = [r.latency for r in rs if r.status != "transport"]
        row: dict[str, Any] = {
            "minute": m, "requests": len(rs), "errors": sum(1 for r in rs if not r.ok),
            "p50_ms": _ms(_pct(answered, 0.5)), "p95_ms": _ms(_pct(answered, 0.95)),
            "classify_p95_ms": _ms(_pct([r.latency for r in rs if r.op == "classify" and r.ok], 0.95)),
            "reads_p95_ms": _ms(_pct([r.latency for r in rs if r.op in ("budget", "ledger", "audit_poll",
                                                                          "list_audits") and r.ok], 0.95)),
            "submit_p95_ms": _ms(_pct([r.latency for r in rs if r.op == "audit_submit" and r.ok], 0.95)),
        }
        for role in roles:
            xs = [s[3] for s in rss if s[1] == role and m * 60 <= s[0] < (m + 1) * 60]
            row[f"rss_{role}_mib"] = round(max(xs), 1) if xs else None
        row["events"] = "; ".join(e for t, e in events if m * 60 <= t < (m + 1) * 60)
        rows.append(row)
    return rows


def rss_growth(rss: list[tuple[float, str, int, float]], warmup: float = 30.0) -> list[dict]:
    """Per process incarnation: median RSS over its first minute after ``warmup`` s vs over its last minute
    (the two windows do not overlap; a process that lived less than ``warmup`` + 90 s is not judged)."""
    out = []
    for (role, inc) in sorted({(s[1], s[2]) for s in rss}):
        pts = [(t, v) for t, r, i, v in rss if r == role and i == inc]
        start, stop = pts[0][0], pts[-1][0]
        if stop - start < warmup + 90:
            out.append({"process": f"{role}#{inc}", "lived_s": round(stop - start), "note": "too short to judge"})
            continue
        first = [v for t, v in pts if start + warmup <= t < start + warmup + 60]
        last = [v for t, v in pts if t >= max(stop - 60, start + warmup + 60)]
        a, b = statistics.median(first), statistics.median(last)
        out.append({"process": f"{role}#{inc}", "lived_s": round(stop - start), "first_min_mib": round(a, 1),
                    "last_min_mib": round(b, 1), "growth_mib": round(b - a, 1),
                    "growth_pct": round(100 * (b - a) / a, 1)})
    return out


def markdown(s: dict) -> str:
    roles = s["roles"]
    lines = [f"### Soak: {s['config']['minutes']} min, {s['config']['clients']} clients, {s['config']['db']}, "
             f"{s['config']['workers']} workers ({s['machine']})", ""]
    head = ["min", "requests", "errors", "p50 ms", "p95 ms", "classify p95", "reads p95", "submit p95",
            *[f"RSS {r} MiB" for r in roles], "events"]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in s["per_minute"]:
        vals = [r["minute"], r["requests"], r["errors"], r["p50_ms"], r["p95_ms"], r["classify_p95_ms"],
                r["reads_p95_ms"], r["submit_p95_ms"], *[r[f"rss_{x}_mib"] for x in roles], r["events"]]
        lines.append("| " + " | ".join("" if v is None else str(v) for v in vals) + " |")
    lines += ["", "| operation | status | count |", "|---|---|---|"]
    for op, by in sorted(s["status_by_op"].items()):
        for st, n in sorted(by.items()):
            lines.append(f"| {op} | {st} | {n} |")
    lg, jb = s["ledger"], s["jobs"]
    lines += ["", f"- ledger = answers: **{'ok' if lg['ok'] else 'FAILED'}** — {lg['answers']} answers, "
              f"{lg['charged_entries']} charged entries, {len(lg['charged_in_flight'])} charged in flight at a "
              f"kill and never answered (replayed afterwards: {s['in_flight_replay']['replayed']}); "
              f"{s['interrupted_answers']['keys']} requests interrupted by a kill and retried with their key: "
              f"{s['interrupted_answers']['charged_before_the_failure_replayed']} answered by replay (charged "
              f"before the kill), {s['interrupted_answers']['computed_on_retry']} computed on the retry; missing {len(lg['answered_without_charge'])}, double "
              f"{len(lg['charged_twice'])}, unexplained {len(lg['unexplained_charges'])}, budget count mismatch "
              f"{len(lg['budget_charges_mismatch'])}",
              f"- jobs: **{'ok' if not jb['stuck'] else 'STUCK'}** — {jb['jobs']} jobs {jb['by_status']}, "
              f"{jb['retried_after_a_crash']} ran more than once, failures {jb['errors'] or 'none'}, drained in "
              f"{jb['drain_seconds']} s (bound {jb['bound_seconds']} s); procrastinate queue after: "
              f"{s['queue_after']}",
              "- RSS growth per process: " + "; ".join(
                  f"{g['process']} {g['growth_mib']:+} MiB ({g['growth_pct']:+}%) over {g['lived_s']} s"
                  if "growth_mib" in g else f"{g['process']} ({g['lived_s']} s: {g['note']})"
                  for g in s["rss_growth"])]
    return "\n".join(lines) + "\n"


# -------------------------------------------------------------------------------------------------- main

async def _traffic(st: State, cluster: Cluster, args: argparse.Namespace) -> None:
    kinds = [k.strip() for k in args.audit_kinds.split(",") if k.strip()]
    tasks = [asyncio.create_task(client_loop(n, st, cluster.url, args.think_ms / 1000, kinds))
             for n in range(args.clients)]
    if not args.no_kills:
        dur = args.minutes * 60
        plan = ([(0.4 * dur, "worker")] if cluster.workers else []) + [(0.6 * dur, "server")]
        tasks.append(asyncio.create_task(chaos(st, cluster, plan)))
    await asyncio.gather(*tasks)


def run(args: argparse.Namespace) -> dict[str, Any]:
    tmp = Path(args.out or tempfile.mkdtemp(prefix="dpicl-soak-"))
    tmp.mkdir(parents=True, exist_ok=True)
    models = json.dumps([{"name": LM, "kind": "lm", "source": f"bundled:{LM}"}])
    cluster = Cluster(args.db, args.workers, tmp, models)
    try:
        t0 = time.monotonic()
        st = State(t0=t0, end=t0 + args.minutes * 60, retry_seconds=args.retry_seconds)
        sampler = RssSampler(cluster.procs, t0)
        sampler.start()
        asyncio.run(_traffic(st, cluster, args))
        traffic_s = time.monotonic() - t0
        jobs = drain_jobs(cluster.url, st, args.drain_seconds)
        sampler.halt.set()
        entries, budgets = _collect_ledger(cluster.url)
        ledger = check_ledger(st.answers, st.attempted, entries, budgets)
        replay = replay_in_flight(cluster.url, st, ledger["charged_in_flight"])
        queue = cluster.queue_state()
    finally:
        cluster.close(args.keep_db)
    roles = [p.role for p in cluster.procs]
    by_op: dict[str, Counter] = defaultdict(Counter)
    for r in st.recs:
        by_op[r.op][r.status] += 1
    summary = {
        "config": {"minutes": args.minutes, "clients": args.clients, "db": args.db, "workers": args.workers,
                   "think_ms": args.think_ms, "kills": not args.no_kills, "audit_kinds": args.audit_kinds,
                   "classify": CLASSIFY, "mix": MIX},
        "machine": f"{os.cpu_count()} cores, {platform.machine()}, load avg {os.getloadavg()[0]:.1f} at the end",
        "server_startup_s": round(cluster.startup_s, 1), "traffic_s": round(traffic_s, 1),
        "requests": len(st.recs), "errors": sum(1 for r in st.recs if not r.ok),
        "status_by_op": {op: dict(c) for op, c in by_op.items()},
        # Private requests that lost an attempt (no answer or a 5xx: the kills) and were retried with their key.
        "interrupted_answers": {
            "keys": sum(1 for a in st.attempted.values() if a.get("failed_attempts")),
            "charged_before_the_failure_replayed": sum(1 for a in st.answers.values()
                                                       if a["failed_attempts"] and a["replayed"]),
            "computed_on_retry": sum(1 for a in st.answers.values() if a["failed_attempts"] and not a["replayed"]),
            "never_answered": sorted(k for k in st.attempted if k not in st.answers),
        },
        "datasets_created": len(st.datasets),
        "events": [{"t": round(t, 1), "event": e} for t, e in st.events],
        "roles": roles,
        "per_minute": per_minute(st.recs, sampler.samples, roles, st.events),
        "rss_growth": rss_growth(sampler.samples),
        "ledger": ledger, "in_flight_replay": replay,
        "jobs": jobs, "queue_after": queue,
        "logs": str(tmp),
    }
    unfinished_queue = {k: v for k, v in queue.items() if k in ("todo", "doing")}
    summary["ok"] = bool(ledger["ok"] and not jobs["stuck"] and not jobs["submitted_but_missing"]
                         and not replay["failed"] and not unfinished_queue)
    (tmp / "summary.json").write_text(json.dumps(summary, indent=1, default=str))
    (tmp / "records.json").write_text(json.dumps([asdict(r) for r in st.recs]))
    (tmp / "rss.json").write_text(json.dumps(sampler.samples))
    # The checker's inputs, to re-check (or audit the checker) after the run.
    (tmp / "ledger.json").write_text(json.dumps({"answers": st.answers, "attempted": st.attempted,
                                                 "entries": entries, "budgets": budgets}, default=str))
    (tmp / "soak.md").write_text(markdown(summary))
    return summary


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=20.0)
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument("--workers", type=int, default=2, help="dpicl worker processes (PostgreSQL)")
    ap.add_argument("--db", choices=["postgres", "sqlite"], default="postgres")
    ap.add_argument("--think-ms", type=float, default=500.0, help="mean exponential pause between requests")
    ap.add_argument("--audit-kinds", default="sleep,sleep,canary_mia")
    ap.add_argument("--no-kills", action="store_true", help="no kill -9 of a worker and the server")
    ap.add_argument("--retry-seconds", type=float, default=300.0, help="how long a request is retried")
    ap.add_argument("--drain-seconds", type=float, default=180.0, help="bound for every job to finish")
    ap.add_argument("--out", help="folder for logs, summary.json and soak.md (default: a temporary folder)")
    ap.add_argument("--keep-db", action="store_true")
    ap.add_argument("--json", action="store_true", help="print the JSON summary instead of the markdown")
    return ap


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.db == "sqlite" and args.workers:
        args.workers = 0  # jobs run inside dpicl serve on SQLite
    s = run(args)
    print(json.dumps(s, indent=1, default=str) if args.json else markdown(s))
    return 0 if s["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
