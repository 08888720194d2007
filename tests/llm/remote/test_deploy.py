"""The deployment files agree with the code (no Docker engine here): docker-compose.yml's default
models are the bundled defaults, docker/vllm.env configures a valid `remote` model that the vLLM
service serves, and the vLLM service runs with the flags the backend needs."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[3]


def _env_file(path: Path) -> dict[str, str]:
    out = {}
    for line in path.read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            key, _, value = line.partition("=")
            out[key.strip()] = value
    return out


def _interpolate_default(value: str) -> str:
    """'${VAR:-default}' -> default (what compose renders when VAR is unset)."""
    m = re.fullmatch(r"\$\{\w+:-(.*)\}", value, flags=re.S)
    return m.group(1) if m else value


@pytest.fixture(scope="module")
def compose():
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def test_default_models_are_the_bundled_defaults(compose):
    from app.config import default_models, load_settings

    env = compose["x-dpicl-env"]
    models = json.loads(_interpolate_default(env["DPICL_MODELS"]))
    assert [m.model_dump() for m in load_settings(models=models).models] == [m.model_dump() for m in default_models()]
    assert _interpolate_default(env["DPICL_DEFAULT_MODEL"]) == default_models()[0].name


def test_vllm_env_configures_a_valid_remote_model_served_by_the_vllm_service(compose, monkeypatch):
    from app.config import load_settings
    from app.llm import ModelSpec
    from app.llm.remote import RemoteOptions

    env = _env_file(ROOT / "docker" / "vllm.env")
    assert env["COMPOSE_PROFILES"] == "vllm"
    settings = load_settings(models=json.loads(env["DPICL_MODELS"]), default_model=env["DPICL_DEFAULT_MODEL"])
    remote = next(m for m in settings.models if m.backend == "remote")
    assert remote.name == settings.default_lm == "smollm2-vllm"
    monkeypatch.setenv("VLLM_API_KEY", env["VLLM_API_KEY"])
    opts = RemoteOptions.from_spec(ModelSpec(remote.name, remote.kind, remote.source, remote.backend, remote.options))
    assert opts.api_key == env["VLLM_API_KEY"] and opts.startup_timeout >= 300

    vllm = compose["services"]["vllm"]
    assert "vllm" in vllm["profiles"]
    args = " ".join(vllm["command"])
    assert opts.base_url == "http://vllm:8000/v1" and "--port=8000" in args
    assert f"--served-model-name=${{VLLM_SERVED_MODEL_NAME:-{opts.served_model_name}}}" in args
    assert "--max-logprobs=-1" in args  # full-vocabulary log-probabilities
    assert "--enable-tokenizer-info-endpoint" in args  # EOS discovery
    assert "--generation-config=vllm" in args  # the model's sampling defaults never leak in
    assert str(vllm["user"]).split(":")[0] != "0" and vllm["healthcheck"]["test"]
    # The vLLM service reads the model volume that the dpicl image fills.
    assert any(v.startswith("models:/models") for v in vllm["volumes"])
    assert "models:/var/lib/dpicl/models" in compose["x-model-cache"]
    for svc in ("dpicl", "worker"):
        assert compose["services"][svc]["depends_on"]["vllm"] == {"condition": "service_healthy", "required": False}
    assert "VLLM_API_KEY" in compose["x-dpicl-env"] and "VLLM_API_KEY" in vllm["environment"]


def test_the_model_the_vllm_service_serves_is_the_bundled_cache_folder(compose):
    from app.llm.bundled import DEFAULT_LM

    vllm = compose["services"]["vllm"]
    assert _interpolate_default(vllm["command"][0]) == f"/models/{DEFAULT_LM}"
    dockerfile = (ROOT / "docker" / "Dockerfile.cpu").read_text()
    assert "DPICL_MODEL_CACHE_DIR=/var/lib/dpicl/models" in dockerfile and "dpicl models --warm" in dockerfile
