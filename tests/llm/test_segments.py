"""Prompts tokenized from remembered pieces (app/llm/segments.py) give exactly the ids of the whole
text, on the bundled SmolLM2 tokenizer, for the bundled tasks' prompts and for hostile text; other
tokenizer configurations are refused; a difference switches the encoder off."""

from __future__ import annotations

import json
import random

import pytest
from tokenizers import Tokenizer

from app.icl import load_bundled
from app.icl.datasets import bundled_names
from app.llm.encode import encode_plain_many
from app.llm.segments import MAX_PIECE_CHARS, VERIFY_EVERY, VERIFY_FIRST, SegmentEncoder, pieces, separable


@pytest.fixture(scope="module")
def backend(lm) -> Tokenizer:
    return lm.tokenizer._tokenizer


def _ids(backend: Tokenizer, texts):
    return [list(e.ids) for e in backend.encode_batch(list(texts), add_special_tokens=False)]


def _variant(backend: Tokenizer, **changes) -> Tokenizer:
    state = json.loads(backend.to_str())
    for key, value in changes.items():
        if key in ("added", "rstrip", "lstrip", "single_word"):
            token = {"id": len(state["model"]["vocab"]) + 7, "content": value if key == "added" else "<|x|>",
                     "single_word": False, "lstrip": False, "rstrip": False, "normalized": False, "special": True}
            if key != "added":
                token[key] = True
            state["added_tokens"].append(token)
        else:
            state[key] = value
    return Tokenizer.from_str(json.dumps(state))


def test_the_bundled_tokenizer_is_separable_and_other_configurations_are_refused(backend, lm):
    assert separable(backend)
    assert lm.segments is not None and lm.segments.enabled
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    assert not separable(_variant(backend, pre_tokenizer={**byte_level, "add_prefix_space": True}))
    assert not separable(_variant(backend, pre_tokenizer={**byte_level, "use_regex": False}))
    assert not separable(_variant(backend, pre_tokenizer={"type": "Whitespace"}))
    assert not separable(_variant(backend, normalizer={"type": "NFKC"}))
    assert not separable(_variant(backend, added="\n\nInput"))
    assert separable(_variant(backend, added="<|x|>"))  # a plain added token is fine
    for flag in ("rstrip", "lstrip", "single_word"):  # one that strips or looks at its neighbours is not
        assert not separable(_variant(backend, **{flag: True}))
    assert not separable(None) and not separable(object())


def test_pieces_split_only_between_non_whitespace_and_rejoin():
    assert pieces("a\n\nb\n\nc") == ["a", "\n\nb", "\n\nc"]
    for text in ("a \n\nb", "a\n\n b", "a\n\n\nb", "\n\nb", "a\n\n", "a\n\x1c\n\nb", "", "ab"):
        assert "".join(pieces(text)) == text
    assert pieces("a \n\nb") == ["a \n\nb"] and pieces("a\n\n b") == ["a\n\n b"] and pieces("a\n\n\nb") == ["a\n\n\nb"]
    assert pieces("a\x1c\n\nb") == ["a\x1c\n\nb"]  # Python calls U+001C whitespace: no split (the safe side)


def test_every_bundled_prompt_is_tokenized_exactly(backend, lm):
    """Both bundled tasks, raw and chat templates, 2 and 4 shots: the pieces' ids concatenated equal the
    whole prompt's, and the encoder never saw a difference."""
    enc = SegmentEncoder(lambda t: _ids(backend, t))
    rng = random.Random(27)
    checked = 0
    for name in bundled_names():
        ds = load_bundled(name)
        ex = ds.exemplars()
        for template in (ds.template, ds.template.with_(mode="chat")):
            for shots in (2, 4):
                texts = []
                for q in [e.input for e in ds.test[:24]]:
                    texts.append(template.render(rng.sample(ex, shots), q, ds.labels, lm=lm))
                whole = _ids(backend, texts)
                assert [[i for p in pieces(t) for i in _ids(backend, [p])[0]] for t in texts] == whole
                assert enc.encode_many(texts, None) == whole
                checked += len(texts)
    assert checked == 2 * 2 * 2 * 24 and enc.mismatches == 0 and enc.hits > 0


_ALPHABET = (list("abcXYZ019") + [" ", "  ", "\t", "\n", "\r\n", "\u00a0", "\u2028", "\u3000", "\x1c", "'", "'s", "'ll",
             "!", "?.", "--", "\u00e9", "e\u0301", "\u4e2d\u6587", "\U0001f600", "\u0627\u0644", "<|im_start|>",
             "<|im_end|>", "<|endoftext|>", "Input: ", "Label: music", "\n\n", "\n\n\n", " \n\n", "\n\n "])


def test_hostile_text_is_tokenized_exactly(backend):
    """3000 texts of random blocks (every kind of whitespace, contractions, combining marks, CJK,
    emoji, RTL, the model's special-token strings, bare and doubled blank lines) joined by blank lines:
    the pieces' ids concatenated are the whole text's, text by text."""
    rng = random.Random(2027)
    texts = []
    for _ in range(3000):
        blocks = ["".join(rng.choice(_ALPHABET) for _ in range(rng.randint(0, 8))) for _ in range(rng.randint(1, 6))]
        texts.append("\n\n".join(blocks))
    whole = _ids(backend, texts)
    split = [pieces(t) for t in texts]
    flat = sorted({p for ps in split for p in ps})
    piece_ids = dict(zip(flat, _ids(backend, flat)))
    bad = [t for t, ps, w in zip(texts, split, whole) if [i for p in ps for i in piece_ids[p]] != w]
    assert not bad, [repr(t) for t in bad[:5]]
    assert sum(len(ps) > 1 for ps in split) > 1000  # the junction case was exercised


def test_a_difference_switches_the_encoder_off_and_returns_the_whole_ids(backend):
    def wrong_on_pieces(texts):  # tokenizes a piece that starts with a blank line differently
        return [ids + [0] if t.startswith("\n\n") else ids for t, ids in zip(texts, _ids(backend, texts))]

    enc = SegmentEncoder(wrong_on_pieces)
    texts = ["Input: a\nLabel: b\n\nInput: c\nLabel:"]
    assert enc.encode_many(texts, None) == _ids(backend, texts)
    assert not enc.enabled and enc.mismatches == 1 and enc.stats()["held"] == 0
    assert enc.encode_many(texts, None) == _ids(backend, texts)  # off for good: whole texts


def test_verification_runs_first_and_then_one_call_in_so_many(backend):
    seen = []

    def counting(texts):
        seen.append(list(texts))
        return _ids(backend, texts)

    enc = SegmentEncoder(counting)
    text = ["x\n\ny"]
    for _ in range(VERIFY_FIRST + 2 * VERIFY_EVERY):
        enc.encode_many(text, None)
    whole_calls = sum(1 for call in seen if call == text)
    assert whole_calls == VERIFY_FIRST + 2  # the first VERIFY_FIRST calls, then calls 64 and 128


def test_pieces_are_remembered_per_tenant(backend):
    enc = SegmentEncoder(lambda t: _ids(backend, t))
    texts = ["Classify.\n\nInput: a\nLabel: x\n\nInput: q\nLabel:"]
    enc.encode_many(texts, "tenant-a")
    misses = enc.misses
    enc.encode_many(texts, "tenant-a")
    assert enc.misses == misses  # every piece remembered
    enc.encode_many(texts, "tenant-b")
    assert enc.misses == 2 * misses  # another tenant's pieces are never a hit


def test_the_model_tokenizes_through_the_pieces_with_the_same_ids(lm):
    ds = load_bundled()
    texts = [ds.template.render(ds.exemplars()[i:i + 4], ds.test[i].input, ds.labels) for i in range(8)]
    before = lm.segments.calls
    assert lm._encode_many(texts) == encode_plain_many(lm.tokenizer, texts)
    assert lm.segments.calls == before + 1


def test_long_pieces_are_tokenized_every_time_and_never_remembered(backend):
    """The memo's size is bounded whatever callers send: a piece over MAX_PIECE_CHARS is not held."""
    enc = SegmentEncoder(lambda t: _ids(backend, t), size=8)
    long_query = "Input: " + "word " * (MAX_PIECE_CHARS // 5) + "end\nLabel:"
    texts = ["Classify.\n\n" + long_query]
    assert enc.encode_many(texts, None) == _ids(backend, texts)
    assert enc.stats()["held"] == 1  # the instruction only
    for i in range(20):  # distinct pieces beyond the LRU's size: it stays at its size
        enc.encode_many([f"Classify.\n\nInput: q{i}\nLabel:"], None)
    assert enc.stats()["held"] == 8
