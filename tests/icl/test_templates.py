import pytest

from app.icl.templates import (
    ASSISTANT_INTENTS,
    DEFAULT,
    ICLINF_AGNEWS,
    ICLINF_TREC,
    TEMPLATES,
    PromptTemplate,
    as_exemplar,
    get_template,
    join_labels,
)
from tests.icl.fakes import FakeLM


def test_iclinf_agnews_raw_prompt_is_table_2():
    ex = [("Wall St. Bears Claw Back Into the Black", "Business")]
    prompt = ICLINF_AGNEWS.render_raw(ex, "Rescuing an Old Saver")
    assert prompt == (
        "Classify the news articles into the categories of World, Sports, Business, and Technology. "
        "Output only the category name (no explanations or extra text) as the first token.\n\n"
        "Article: Wall St. Bears Claw Back Into the Black\nAnswer: Business\n\n"
        "Article: Rescuing an Old Saver\nAnswer:"
    )
    # the label continuation carries the space; the prompt does not end in one
    assert ICLINF_AGNEWS.continuation("Sports") == " Sports"
    assert not prompt.endswith(" ")


def test_trec_preset_prefixes_and_labels():
    p = ICLINF_TREC.render_raw([], "When was Ozzy Osbourne born?")
    assert p.endswith("Question: When was Ozzy Osbourne born?\nAnswer Type:")
    assert ICLINF_TREC.labels == ("Number", "Location", "Person", "Description", "Entity", "Abbreviation")


def test_labels_placeholder_and_zero_shot_prompt():
    p = ASSISTANT_INTENTS.render_raw([], "Will it rain?", ["weather", "music", "alarm"])
    assert p == ("Classify each request to the voice assistant by its intent: weather, music, or alarm.\n\n"
                 "Request: Will it rain?\nIntent:")
    # the preset's own labels are used when none are given
    assert "weather, music, alarm, lights, or shopping" in ASSISTANT_INTENTS.render_raw([], "x")
    with pytest.raises(ValueError, match="no labels"):
        DEFAULT.render_raw([], "x")
    assert join_labels(["a", "b"]) == "a or b"


def test_no_instruction_and_custom_separators():
    t = PromptTemplate(instruction="", input_prefix="Q: ", output_prefix="A:", separator="\n###\n", io_separator=" ")
    assert t.render_raw([("1+1", "2")], "2+2") == "Q: 1+1 A: 2\n###\nQ: 2+2 A:"


def test_chat_rendering_turns_and_prefill():
    lm = FakeLM()
    t = ASSISTANT_INTENTS.with_(mode="chat")
    msgs = t.chat_messages([("a", "music"), ("b", "alarm")], "q")
    assert [m["role"] for m in msgs] == ["system", "user", "assistant", "user", "assistant", "user"]
    assert msgs[2]["content"] == "Intent: music"
    prompt = t.render([("a", "music"), ("b", "alarm")], "q", lm=lm)
    assert prompt.endswith("<|user|>Request: q<|end|>\n<|assistant|>Intent:")
    with pytest.raises(ValueError, match="pass lm"):
        t.render([], "q")


def test_exemplar_forms():
    assert as_exemplar(("x", "y")) == ("x", "y")
    assert as_exemplar({"input": "x", "output": "y"}) == ("x", "y")
    assert as_exemplar({"input": "x", "label": "y"}) == ("x", "y")
    with pytest.raises(TypeError):
        as_exemplar(("x", 3))


def test_get_template():
    assert get_template(None) is DEFAULT
    assert get_template("iclinf-agnews") is ICLINF_AGNEWS
    t = get_template({"preset": "assistant-intents", "mode": "chat", "labels": ["a", "b"]})
    assert t.mode == "chat" and t.labels == ("a", "b") and t.input_prefix == "Request: "
    with pytest.raises(ValueError, match="unknown template"):
        get_template("nope")
    with pytest.raises(ValueError, match="unknown template fields"):
        get_template({"colour": "red"})
    with pytest.raises(ValueError, match="mode"):
        PromptTemplate(mode="html")
    with pytest.raises(ValueError, match="two spaces"):
        PromptTemplate(output_prefix="Answer: ")
    assert set(TEMPLATES) >= {"iclinf-agnews", "iclinf-dbpedia", "iclinf-trec", "assistant-intents", "default"}
