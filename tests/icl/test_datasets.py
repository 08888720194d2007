import csv
import importlib.util
import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from app.icl.datasets import HF_TASKS, hf_task, load_bundled, load_hf_dataset, load_hf_task
from app.icl.templates import ICLINF_AGNEWS, ICLINF_DBPEDIA, ICLINF_TREC, SUBJ

ROOT = Path(__file__).resolve().parents[2]


# ----------------------------------------------------------------- bundled


@pytest.mark.parametrize("name, labels", [
    ("assistant_intents", ("weather", "music", "alarm", "lights", "shopping")),
    ("support_intents", ("billing", "shipping", "refund", "technical", "account")),
])
def test_bundled_task_shape(name, labels):
    ds = load_bundled(name)
    assert ds.name == name
    assert len(ds.train) == 400 and len(ds.test) == 200
    assert ds.labels == labels
    for split in (ds.train, ds.test):
        counts = Counter(e.output for e in split)
        assert set(counts) == set(ds.labels)
        assert len(set(counts.values())) == 1  # balanced: 80 / 40 per label
    texts = [e.input for e in ds.train + ds.test]
    assert len({t.lower() for t in texts}) == len(texts)  # no text twice, across splits too
    lengths = [len(t.split()) for t in texts]
    assert 2 <= min(lengths) and max(lengths) <= 40  # short messages
    assert ds.exemplars()[0] == (ds.train[0].input, ds.train[0].output)


def test_default_bundled_task():
    assert load_bundled().name == "assistant_intents"


def test_bundled_file_is_reproducible_from_the_script():
    out = subprocess.run([sys.executable, str(ROOT / "scripts" / "make_bundled_task.py"), "--check"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr


def test_unknown_bundled_task():
    with pytest.raises(ValueError, match="bundled"):
        load_bundled("nope")


# ------------------------------------------------------ hub-format loaders


def _jsonl(path: Path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_ag_news_jsonl_ids_to_iclinf_words(tmp_path):
    p = _jsonl(tmp_path / "train.jsonl", [
        {"text": "Wall St. Bears Claw Back Into the Black", "label": 2},
        {"text": "Phelps wins gold", "label": 1},
        {"text": "New chip from Intel", "label": 3},
        {"text": "Talks in Geneva", "label": 0},
        {"text": "Named label", "label": "Sci/Tech"},
    ])
    ex = load_hf_dataset("ag_news", "train", path=p)
    assert [e.output for e in ex] == ["Business", "Sports", "Technology", "World", "Technology"]
    assert ex[0].input == "Wall St. Bears Claw Back Into the Black"
    assert set(e.output for e in ex) <= set(ICLINF_AGNEWS.labels)


def test_dbpedia_csv_joins_title_and_content(tmp_path):
    p = tmp_path / "test.csv"
    with p.open("w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=["label", "title", "content"])
        w.writeheader()
        w.writerow({"label": "0", "title": "Bergan Mercy Medical Center", "content": "A hospital in Omaha Nebraska."})
        w.writerow({"label": "13", "title": "Dune", "content": "A novel by Frank Herbert."})
        w.writerow({"label": "1", "title": "Eton College", "content": "A school."})
    ex = load_hf_dataset("dbpedia_14", "test", path=p)
    assert ex[0].input == "Bergan Mercy Medical Center. A hospital in Omaha Nebraska."
    assert [e.output for e in ex] == ["Company", "Book", "School"]
    assert len(HF_TASKS["dbpedia_14"].label_words) == 14 == len(ICLINF_DBPEDIA.labels)


def test_trec_both_column_names_and_folder_split_pick(tmp_path):
    d = tmp_path / "trec"
    d.mkdir()
    _jsonl(d / "train.jsonl", [{"text": "When was Ozzy Osbourne born?", "coarse_label": 5, "fine_label": 39},
                               {"text": "What does NASA stand for?", "coarse_label": 0, "fine_label": 1}])
    _jsonl(d / "test.jsonl", [{"text": "Who wrote Hamlet?", "label-coarse": 3, "label-fine": 29},
                              {"text": "Where is Kyoto?", "label-coarse": "LOC", "label-fine": 30}])
    train = load_hf_dataset("trec", "train", path=d)
    test = load_hf_dataset("trec", "test", path=d)
    assert [e.output for e in train] == ["Number", "Abbreviation"]
    assert [e.output for e in test] == ["Person", "Location"]
    task = load_hf_task("trec", path=d)
    assert task.template is ICLINF_TREC and len(task.train) == 2 and len(task.test) == 2
    with pytest.raises(FileNotFoundError, match="'validation'"):  # never falls back to another split
        load_hf_dataset("trec", "validation", path=d)


def test_subj_label_text_and_json_array(tmp_path):
    p = tmp_path / "subj.json"
    p.write_text(json.dumps([{"text": "the film opens in 1950s paris .", "label": 0, "label_text": "objective"},
                             {"text": "a gorgeous , witty film .", "label": 1, "label_text": "subjective"}]))
    ex = load_hf_dataset("SetFit/subj", path=p)
    assert [e.output for e in ex] == ["objective", "subjective"]
    assert hf_task("subj").template is SUBJ


def test_limit_and_sampling(tmp_path):
    p = _jsonl(tmp_path / "a.jsonl", [{"text": f"t{i}", "label": i % 4} for i in range(50)])
    assert [e.input for e in load_hf_dataset("ag_news", path=p, limit=3)] == ["t0", "t1", "t2"]
    a = load_hf_dataset("ag_news", path=p, limit=10, rng=np.random.default_rng(0))
    b = load_hf_dataset("ag_news", path=p, limit=10, rng=np.random.default_rng(0))
    assert a == b and len(a) == 10 and [e.input for e in a] != [f"t{i}" for i in range(10)]


def test_loader_errors(tmp_path):
    with pytest.raises(ValueError, match="unsupported dataset"):
        load_hf_dataset("imdb", path=tmp_path)
    with pytest.raises(FileNotFoundError):
        load_hf_dataset("ag_news", path=tmp_path / "missing.jsonl")
    bad = _jsonl(tmp_path / "bad.jsonl", [{"text": "x", "label": 7}])
    with pytest.raises(ValueError, match="out of range"):
        load_hf_dataset("ag_news", path=bad)
    bad = _jsonl(tmp_path / "bad2.jsonl", [{"text": "x", "label": "Weather"}])
    with pytest.raises(ValueError, match="cannot map label"):
        load_hf_dataset("ag_news", path=bad)
    bad = _jsonl(tmp_path / "bad3.jsonl", [{"body": "x", "label": 1}])
    with pytest.raises(ValueError, match="missing text column"):
        load_hf_dataset("ag_news", path=bad)


@pytest.mark.skipif(importlib.util.find_spec("datasets") is None, reason="the optional `datasets` package is not installed")
def test_parquet_through_datasets(tmp_path):
    import datasets

    p = tmp_path / "train.parquet"
    datasets.Dataset.from_dict({"text": ["a", "b"], "label": [0, 1], "label_text": ["objective", "subjective"]}).to_parquet(str(p))
    ex = load_hf_dataset("SetFit/subj", path=p)
    assert [e.output for e in ex] == ["objective", "subjective"]


def test_hub_path_calls_load_dataset_with_the_hub_id(monkeypatch):
    # No network in tests: stand in for the `datasets` module and check what the loader asks for.
    import types

    import app.icl.datasets as mod

    calls = []

    def load_dataset(hub_id, split, **kw):
        calls.append((hub_id, split, kw))
        return [{"text": "Where is Kyoto?", "coarse_label": 4, "fine_label": 30}]

    monkeypatch.setattr(mod, "_datasets_module", lambda: types.SimpleNamespace(load_dataset=load_dataset))
    ex = load_hf_dataset("trec", "test", revision="main")
    assert calls == [("CogComp/trec", "test", {"revision": "main"})]
    assert ex[0].output == "Location"
