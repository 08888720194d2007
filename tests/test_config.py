import pytest

from app.config import SettingsError, load_settings


def test_defaults_are_embedded():
    s = load_settings()
    assert s.database_url == "sqlite:///./dpicl.db"
    assert [m.name for m in s.models] == ["smollm2-135m-instruct", "all-minilm-l6-v2"]
    assert s.default_lm == "smollm2-135m-instruct"


@pytest.mark.parametrize(
    "env, expected",
    [
        ({"DPICL_PORT": "70000"}, "DPICL_PORT"),
        ({"DPICL_DATABASE_URL": "mysql://x"}, "DPICL_DATABASE_URL"),
        ({"DPICL_DEVICE": "tpu"}, "DPICL_DEVICE"),
        ({"DPICL_MODELS": "not json"}, "DPICL_MODELS"),
        ({"DPICL_MODELS": '[{"name": "a b", "source": "x"}]'}, "DPICL_MODELS"),
        ({"DPICL_DEFAULT_MODEL": "nope"}, "DPICL_DEFAULT_MODEL"),
    ],
)
def test_invalid_settings_name_the_variable(monkeypatch, env, expected):
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    with pytest.raises(SettingsError) as ei:
        load_settings()
    assert expected in str(ei.value)


def test_models_from_json(monkeypatch):
    monkeypatch.setenv(
        "DPICL_MODELS",
        '[{"name": "m1", "kind": "lm", "source": "/models/m1"}, {"name": "e", "kind": "embedder", "source": "bundled:all-minilm-l6-v2"}]',
    )
    s = load_settings()
    assert [m.source for m in s.models] == ["/models/m1", "bundled:all-minilm-l6-v2"]
