"""benchmarks/bench_soak.py cannot rot: a 12-second run against a real `dpicl serve` (SQLite, the bundled
SmolLM2, in-process jobs, no kills), and its ledger-vs-answers checker fed the real run's data, then that
data broken in each way the checker must catch."""

from __future__ import annotations

import copy
import json

import pytest

from tests.scripts import load_script


@pytest.fixture(scope="module")
def soak():
    return load_script("benchmarks/bench_soak.py")


@pytest.fixture(scope="module")
def run(soak, tmp_path_factory):
    out = tmp_path_factory.mktemp("soak")
    args = soak.parser().parse_args(["--db", "sqlite", "--workers", "0", "--minutes", "0.2", "--clients", "4",
                                     "--no-kills", "--think-ms", "200", "--drain-seconds", "60",
                                     "--out", str(out)])
    return soak.run(args), out


def test_short_run_is_clean_and_reports_everything(run):
    s, out = run
    assert s["ok"], json.dumps(s, indent=1, default=str)[:4000]
    assert s["errors"] == 0 and s["status_by_op"]["classify"].get("200", 0) >= 1
    # Repeated questions are re-released at no cost (answer reuse): every other answer is one charge.
    assert s["ledger"]["answers"] - s["ledger"]["reused_answers"] == s["ledger"]["charged_entries"] >= 1
    assert s["jobs"]["stuck"] == [] and s["jobs"]["jobs"] == sum(s["jobs"]["by_status"].values())
    row = s["per_minute"][0]
    assert row["requests"] > 0 and row["p95_ms"] is not None and row["rss_server_mib"] > 100
    md = (out / "soak.md").read_text()
    assert "ledger = answers: **ok**" in md and "| classify | 200 |" in md
    assert json.loads((out / "summary.json").read_text())["ok"] is True


def test_checker_catches_each_broken_ledger_on_the_real_data(soak, run):
    _, out = run
    data = json.loads((out / "ledger.json").read_text())
    answers, attempted, entries, budgets = data["answers"], data["attempted"], data["entries"], data["budgets"]
    assert soak.check_ledger(answers, attempted, entries, budgets)["ok"]
    key = next(k for k, a in answers.items() if not a.get("reused"))
    entry = next(e for e in entries if e["idempotency_key"] == key)
    # a reused answer that was charged under its own key after all
    reused = {**answers, key: {**answers[key], "reused": True}}
    r = soak.check_ledger(reused, attempted, entries, budgets)
    assert not r["ok"] and r["reused_but_charged"] == [key]

    # an answer the client never received (in flight at a kill): reported, not a failure
    r = soak.check_ledger({k: v for k, v in answers.items() if k != key}, attempted, entries, budgets)
    assert r["ok"] and r["charged_in_flight"] == [key]
    # a charge for a request nobody sent
    r = soak.check_ledger({k: v for k, v in answers.items() if k != key},
                          {k: v for k, v in attempted.items() if k != key}, entries, budgets)
    assert not r["ok"] and r["unexplained_charges"] == [key]
    # an answer without its charge
    r = soak.check_ledger(answers, attempted, [e for e in entries if e is not entry], None)
    assert not r["ok"] and r["answered_without_charge"] == [key]
    # two charges for one key
    r = soak.check_ledger(answers, attempted, entries + [copy.deepcopy(entry)], None)
    assert not r["ok"] and r["charged_twice"] == [key]
    # the entry's epsilon is not what the answer stated
    bad = [({**e, "epsilon": e["epsilon"] * 2} if e is entry else e) for e in entries]
    r = soak.check_ledger(answers, attempted, bad, None)
    assert not r["ok"] and r["entry_differs_from_answer"] == [key]
    # a refunded charge behind an answer
    bad = [({**e, "status": "refunded"} if e is entry else e) for e in entries]
    assert not soak.check_ledger(answers, attempted, bad, None)["ok"]
    # the budget counts a charge the ledger lacks
    ds = entry["dataset_id"]
    bad_budgets = {**budgets, ds: {**budgets[ds], "charges": budgets[ds]["charges"] + 1}}
    r = soak.check_ledger(answers, attempted, entries, bad_budgets)
    assert not r["ok"] and r["budget_charges_mismatch"] == [ds]
