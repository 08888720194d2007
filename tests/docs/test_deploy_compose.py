"""docker-compose.yml's `scale` profile and docs/deploy.md say the same thing (no Docker engine or
compose plugin here: the file is parsed as YAML and checked against the docs and docker/nginx.conf)."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]


def _compose() -> dict:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text(encoding="utf-8"))


def test_scale_profile_has_replicas_a_balancer_and_workers_on_one_postgres():
    services = _compose()["services"]
    rep, lb, worker = services["dpicl-replica"], services["lb"], services["worker"]
    assert rep["profiles"] == ["scale"] and lb["profiles"] == ["scale"]
    assert "profiles" not in worker and "profiles" not in services["postgres"]  # shared by every profile
    assert rep["command"][:2] == ["dpicl", "serve"] and worker["command"] == ["dpicl", "worker"]
    assert rep["environment"]["DPICL_DATABASE_URL"] == worker["environment"]["DPICL_DATABASE_URL"]
    assert rep["environment"]["DPICL_DATABASE_URL"].startswith("postgresql://")
    assert rep["environment"]["DPICL_MIGRATE_ON_STARTUP"] == "false"  # the migrate service runs them once
    assert rep["environment"]["DPICL_JOB_RUNNER"] == "procrastinate"  # replicas queue, workers run
    assert rep["deploy"]["replicas"] == "${DPICL_REPLICAS:-3}"
    assert rep["depends_on"]["migrate"]["condition"] == "service_completed_successfully"
    assert "ports" not in rep  # reached through the balancer only
    assert rep["depends_on"]["vllm"] == {"condition": "service_healthy", "required": False}


def test_balancer_config_names_the_replica_service():
    lb = _compose()["services"]["lb"]
    mount = next(v for v in lb["volumes"] if "nginx.conf" in v)
    src = mount.split(":")[0]
    conf = (ROOT / src).read_text(encoding="utf-8")
    port = _compose()["services"]["dpicl-replica"]["command"][-1]
    assert f"server dpicl-replica:{port}" in conf
    assert "non_idempotent" not in re.sub(r"#.*", "", conf)  # a POST is never retried on another replica
    assert lb["ports"] == ["8080:80"] and re.search(r"listen 80;", conf)


def test_docs_match_the_compose_file():
    doc = (ROOT / "docs" / "deploy.md").read_text(encoding="utf-8")
    head = (ROOT / "docker-compose.yml").read_text(encoding="utf-8")
    cmd = "docker compose --profile scale up --build --scale worker=2"
    assert cmd in doc and cmd in head
    for name in ("dpicl-replica", "`lb`", "port 8080", "DPICL_REPLICAS", "docker/nginx.conf",
                 "tests/answers/test_replicas.py", "`worker`"):
        assert name in doc, name
    assert (ROOT / "tests" / "answers" / "test_replicas.py").is_file()
