"""`dpicl serve` as a real process: models load before traffic, health says ready."""

import os
import subprocess
import sys
import time

import httpx

from tests.conftest import free_port, model_cache_dir


def _env(**extra):
    env = dict(os.environ)
    env.update({"DPICL_MODEL_CACHE_DIR": str(model_cache_dir()), "DPICL_DEVICE": "cpu"}, **extra)
    return env


def test_serve_starts_on_embedded_defaults(tmp_path):
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "app.cli", "serve", "--port", str(port)],
        cwd=tmp_path,  # the default sqlite:///./dpicl.db lands here
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.time() + 180
        body = None
        while time.time() < deadline:
            assert proc.poll() is None, proc.stdout.read()
            try:
                r = httpx.get(f"http://127.0.0.1:{port}/v1/health", timeout=2)
            except httpx.TransportError:
                time.sleep(0.2)
                continue
            assert r.status_code == 200, r.text  # answers only once models are loaded
            body = r.json()
            break
        assert body is not None, "server never answered"
        assert body["database"]["dialect"] == "sqlite"
        assert (tmp_path / "dpicl.db").exists()
        models = httpx.get(f"http://127.0.0.1:{port}/v1/models").json()["data"]
        assert {m["id"] for m in models} == {"smollm2-135m-instruct", "all-minilm-l6-v2"}
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_invalid_setting_fails_fast_naming_it(tmp_path):
    r = subprocess.run(
        [sys.executable, "-m", "app.cli", "serve"],
        cwd=tmp_path,
        env=_env(DPICL_DEVICE="tpu"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2
    assert "DPICL_DEVICE" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_migrate_command(tmp_path):
    url = f"sqlite:///{tmp_path / 'm.db'}"
    r = subprocess.run(
        [sys.executable, "-m", "app.cli", "migrate"], env=_env(DPICL_DATABASE_URL=url), capture_output=True, text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    from app.store import migrate

    assert migrate.current_revision(url) == migrate.head_revision()
