"""`dpicl privacy ...`: same numbers and keys as the library; one-line errors, exit code 2."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from app.cli.privacy import privacy_app
from app.privacy import (
    calibrate_clip_softmax,
    epsilon_lower_bound,
    gdp_epsilon,
    service,
)

runner = CliRunner()
ROOT = Path(__file__).resolve().parents[2]

CALIBRATE = ["calibrate", "--mechanism", "clip-softmax", "--solve-for", "temperature", "--target-epsilon", "4",
             "--delta", "1e-5", "--clip", "10", "--batch-size", "50", "--compositions", "2000", "--orders", "2-99"]


def run_json(args):
    res = runner.invoke(privacy_app, [*args, "--json"])
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


def test_calibrate_json_matches_library():
    out = run_json(CALIBRATE)
    lib = calibrate_clip_softmax("temperature", 4, 1e-5, compositions=2000, clip=10, batch_size=50, orders="2-99")
    assert out["temperature"] == lib.value and out["alpha"] == lib.alpha and out["epsilon"] == lib.epsilon
    assert out["epsilon"] <= 4 and out["delta"] == 1e-5 and out["solve_for"] == "temperature"
    assert out == service.calibrate(mechanism="clip-softmax", solve_for="temperature", target_epsilon=4, delta=1e-5,
                                    clip=10, batch_size=50, compositions=2000, orders="2-99")


def test_calibrate_batch_size_and_gaussian():
    out = run_json(["calibrate", "--mechanism", "clip-softmax", "--solve-for", "batch-size", "--target-epsilon", "4",
                    "--delta", "1e-5", "--clip", "10", "--temperature", "1", "--compositions", "2000"])
    assert isinstance(out["batch_size"], int) and out["epsilon"] <= 4
    g = run_json(["calibrate", "--mechanism", "gaussian", "--solve-for", "sigma", "--sensitivity", "1.4142135623730951",
                  "--target-epsilon", "0.5", "--delta", "1e-5"])
    assert g["sigma"] == pytest.approx(9.9445, abs=5e-5) and g["alpha"] is None


def test_text_output_names_the_solved_value():
    res = runner.invoke(privacy_app, CALIBRATE)
    assert res.exit_code == 0
    lines = dict(line.split(None, 1) for line in res.stdout.strip().splitlines())
    assert set(["temperature", "alpha", "epsilon"]) <= set(lines)


def test_convert_and_empirical():
    assert run_json(["convert", "--mu", "1", "--delta", "1e-5"])["epsilon"] == pytest.approx(gdp_epsilon(1.0, 1e-5))
    assert run_json(["convert", "--rho", "0.5", "--delta", "1e-5"])["epsilon"] == pytest.approx(4.728507, abs=5e-7)
    r = run_json(["convert", "--orders", "2,3,4", "--rdp", "0.1,0.2,0.3", "--delta", "1e-5"])
    assert r["source"] == "rdp" and r["alpha"] == 4
    e = run_json(["empirical", "--tp", "500", "--fn", "0", "--fp", "0", "--tn", "500", "--confidence", "0.99"])
    assert e["epsilon"] == epsilon_lower_bound(500, 0, 0, 500, 0.99).epsilon
    a = run_json(["empirical", "--accuracy", "0.592", "--trials", "1000"])
    assert a["correct"] == 592 and a["epsilon_point"] == pytest.approx(0.37224, abs=1e-5)


@pytest.mark.parametrize(
    "args,needle",
    [
        (["calibrate", "--mechanism", "clip-softmax", "--solve-for", "temperature", "--target-epsilon", "0",
          "--delta", "1e-5", "--clip", "1", "--batch-size", "2", "--compositions", "3"], "--target-epsilon"),
        (["calibrate", "--mechanism", "clip-softmax", "--solve-for", "temperature", "--target-epsilon", "nan",
          "--delta", "1e-5", "--clip", "1", "--batch-size", "2", "--compositions", "3"], "--target-epsilon"),
        (["calibrate", "--mechanism", "clip-softmax", "--solve-for", "temperature", "--target-epsilon", "1",
          "--delta", "2", "--clip", "1", "--batch-size", "2", "--compositions", "3"], "--delta"),
        (["calibrate", "--mechanism", "clip-softmax", "--solve-for", "temperature", "--target-epsilon", "1",
          "--delta", "1e-5", "--clip", "1", "--batch-size", "2", "--compositions", "3", "--orders", ""], "--orders"),
        (["calibrate", "--mechanism", "clip-softmax", "--solve-for", "temperature", "--target-epsilon", "1",
          "--delta", "1e-5", "--clip", "1", "--batch-size", "2", "--compositions", "3", "--upper", "0.001"],
         "--target-epsilon"),
        (["calibrate", "--mechanism", "gaussian", "--solve-for", "sigma", "--target-epsilon", "inf", "--delta", "1e-5"],
         "--target-epsilon"),
        (["convert", "--rho", "abc", "--delta", "1e-5"], "--rho"),
        (["convert", "--rho", "1", "--mu", "1", "--delta", "1e-5"], "source"),
        (["empirical", "--tp", "5", "--fn", "0", "--fp", "0", "--tn", "5", "--trials", "11"], "--trials"),
        (["empirical", "--tp", "5", "--fn", "0", "--fp", "0"], "--tn"),
        (["empirical", "--accuracy", "1.5", "--trials", "10"], "--accuracy"),
    ],
)
def test_bad_input_one_line_exit_2(args, needle):
    res = runner.invoke(privacy_app, args)
    assert res.exit_code == 2
    err = res.stderr.strip()
    assert len(err.splitlines()) == 1 and needle in err and "error" in err
    assert res.stdout == ""


def test_mounted_under_dpicl_privacy():
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    ok = subprocess.run([sys.executable, "-m", "app.cli", "privacy", *CALIBRATE, "--json"], cwd=ROOT, env=env,
                        capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["epsilon"] <= 4
    bad = subprocess.run([sys.executable, "-m", "app.cli", "privacy", "convert", "--rho", "0.5", "--delta", "0"],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1 and "--delta" in bad.stderr
