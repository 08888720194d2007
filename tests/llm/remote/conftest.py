"""Fixtures of the remote-backend tests.

``test_client.py`` needs no vLLM (a fake server on loopback) and runs in the main suite.
``test_vllm.py`` is the contract against a real ``vllm serve`` of the bundled SmolLM2's
safetensors copy: it runs only when ``DPICL_TEST_VLLM_URL`` names the server's OpenAI base
URL (``scripts/vllm_ci.sh`` starts one and sets it), and is skipped otherwise.
``DPICL_TEST_VLLM_MODEL`` names the served model (default: the server's only model).
"""

from __future__ import annotations

import os

import pytest

VLLM_URL = os.environ.get("DPICL_TEST_VLLM_URL", "").strip()
VLLM_MODEL = os.environ.get("DPICL_TEST_VLLM_MODEL", "").strip() or None

needs_vllm = pytest.mark.skipif(
    not VLLM_URL, reason="no vLLM server: set DPICL_TEST_VLLM_URL (scripts/vllm_ci.sh starts one and sets it)"
)


def remote_spec(name: str = "smollm2-vllm", **options):
    from app.llm import ModelSpec

    opts = {"served_model_name": VLLM_MODEL, "timeout": 120, **options}
    return ModelSpec(name=name, kind="lm", source=VLLM_URL, backend="remote",
                     options={k: v for k, v in opts.items() if v is not None})


def load_remote_lm(name: str = "smollm2-vllm", **options):
    from app.llm import load_model

    return load_model(remote_spec(name, **options), cache_dir="/unused")


@pytest.fixture
def server():
    """A fake vLLM server on loopback (``fake_server.FakeVLLM``), for the tests that need no real one."""
    from .fake_server import FakeVLLM

    with FakeVLLM() as srv:
        yield srv


@pytest.fixture(scope="session")
def remote_lm():
    if not VLLM_URL:
        pytest.skip("no vLLM server (DPICL_TEST_VLLM_URL)")
    lm = load_remote_lm()
    yield lm
    lm.close()


@pytest.fixture(scope="module")
def one_torch_thread():
    """The in-process reference on one torch thread: the vLLM engine holds the other core."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
