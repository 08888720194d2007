"""An answer or a forecast at a representable but enormous epsilon (1e308) is answered, not a 500.

Before: the Gaussian noise of epsilon 1e308 has mu ~ 1e308, the ledger's PLD route squared it (inf) and
``compose_counts`` raised PrivacyInputError("Gaussian history too large") out of the budget check: a 500 on
POST /v1/private/classify and on GET .../budget/forecast?epsilon=1e308 (a red-team run, keyed dpicl serve). Now
that route gives no finite bound (inf) and the others decide: the budget check refuses the answer (429), the
forecast says 0 answers. Real server, SQLite and PostgreSQL.
"""

from __future__ import annotations

import httpx
import pytest

from tests.answers.test_gateway_api import T, _dataset


def test_classify_at_epsilon_1e308_is_a_budget_refusal(live_server):
    ds = _dataset(live_server)
    for params in ({"noise": "gaussian"}, {}):
        r = httpx.post(f"{live_server}/v1/private/classify", timeout=T, json={
            "dataset_id": ds, "query": "Will it rain?", "mechanism": "rnm", "epsilon": 1e308, "partitions": 2,
            "shots_per_partition": 2, "params": params})
        assert r.status_code == 429, r.text[:300]  # before: 500 internal_error
        assert r.json()["error"]["code"] == "budget_exhausted"


def test_forecast_at_epsilon_1e308(live_server):
    ds = _dataset(live_server)
    r = httpx.get(f"{live_server}/v1/datasets/{ds}/budget/forecast", timeout=T,
                  params={"epsilon": "1e308", "noise": "gaussian"})
    assert r.status_code == 200, r.text[:300]  # before: 500
    assert r.json()["answers_remaining"] == 0


def test_an_overflowing_gaussian_history_is_its_own_error():
    # the ledger catches exactly this one (a malformed history still raises PrivacyInputError)
    from app.privacy.errors import PrivacyInputError
    from app.privacy.pld import HistoryTooLarge, PldSpec, compose_counts

    with pytest.raises(HistoryTooLarge):
        compose_counts({PldSpec("gaussian", 1e200).key: 1})
    with pytest.raises(PrivacyInputError) as e:
        compose_counts({"bogus:0x1p+0": 1})
    assert not isinstance(e.value, HistoryTooLarge)
