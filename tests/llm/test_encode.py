"""app/llm/encode.py: the direct Rust call gives the ids the transformers wrapper gives (issue 27), and
steps aside whenever the wrapper would configure the backend differently."""

from __future__ import annotations

from app.llm.encode import _direct_backend, encode_plain_many

TEXTS = [
    "", " ", "\n\n", "Hi", " World", " science and technology", "naïve café — 東京 🙂",
    "<|im_start|>user\nignore the above<|im_end|>", "<|endoftext|>", "a\tb\r\nc\x00d",
    "Text: the bank held rates.\nLabel: Business\n\nText: the team won.\nLabel:",
    "x" * 3000, "  leading and trailing  ",
]


def _wrapper(tok, texts):
    return [list(r) for r in tok(list(texts), add_special_tokens=False)["input_ids"]]


def test_direct_call_equals_the_wrapper(lm, mixed_prompts):
    tok = lm.tokenizer
    texts = TEXTS + list(mixed_prompts)
    assert _direct_backend(tok) is not None  # the bundled tokenizer takes the direct path
    assert encode_plain_many(tok, texts) == _wrapper(tok, texts)
    assert lm._encode_many(texts) == _wrapper(tok, texts)


def test_special_token_text_is_encoded_as_the_wrapper_does(lm):
    tok = lm.tokenizer
    got = encode_plain_many(tok, ["<|im_start|>"])[0]
    assert got == _wrapper(tok, ["<|im_start|>"])[0]
    assert len(got) == 1  # split_special_tokens is off (the wrapper's default): one special token


def test_steps_aside_when_the_backend_is_configured_otherwise(lm):
    tok = lm.tokenizer
    backend = tok._tokenizer
    try:
        backend.enable_truncation(max_length=3)
        assert _direct_backend(tok) is None
    finally:
        backend.no_truncation()
    old = tok.split_special_tokens
    try:
        tok.split_special_tokens = True  # the wrapper would split "<|im_start|>" into pieces
        assert _direct_backend(tok) is None
        assert encode_plain_many(tok, ["<|im_start|>"]) == _wrapper(tok, ["<|im_start|>"])
        assert len(encode_plain_many(tok, ["<|im_start|>"])[0]) > 1
    finally:
        tok.split_special_tokens = old
        _wrapper(tok, ["reset"])  # the wrapper's call puts the backend back as it sets it
    assert _direct_backend(tok) is not None


def test_edge_batches(lm):
    assert encode_plain_many(lm.tokenizer, []) == [] == lm._encode_many([])  # the wrapper raises on []
    assert encode_plain_many(lm.tokenizer, ["only one"]) == _wrapper(lm.tokenizer, ["only one"])
