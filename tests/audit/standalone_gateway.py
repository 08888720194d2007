"""A small independent DP-ICL gateway for audit tests. It imports nothing from ``app``.

It speaks the two calls a remote canary audit makes (``POST /v1/datasets``,
``POST /v1/private/classify``) over a real HTTP server. The "model" is an ideal
copier: a partition whose exemplars contain the query's text verbatim votes that
exemplar's label, every other partition votes its most frequent label. Votes go
through Gaussian report-noisy-max calibrated by the analytic Gaussian mechanism
(Balle & Wang 2018, Theorem 8) at L2 sensitivity sqrt(2) (replace-one: one vote
moves), solved here with scipy, not with dpicl's calibration.

Modes: ``correct``, ``sigma_quarter`` (sigma / 4), ``winner_only`` (noise on the
largest clean count only), ``no_noise``, ``swapped_no_noise`` (a label-mapping bug behind no
noise: two labels, the one that did NOT win is released), ``non_private`` (plain ICL over every
exemplar, no partitions, no noise: the copier answers the canary's label whenever it is in the set).
"""

from __future__ import annotations

import itertools
import json
import math
import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
from scipy import optimize, stats

MODES = ("correct", "sigma_quarter", "winner_only", "no_noise", "swapped_no_noise", "non_private")


def analytic_gaussian_sigma(epsilon: float, delta: float, sensitivity: float = math.sqrt(2.0)) -> float:
    """Smallest sigma with delta(eps) <= delta, where (Balle & Wang 2018, Thm 8)
    delta(eps) = Phi(D/(2s) - eps s/D) - e^eps Phi(-D/(2s) - eps s/D)."""
    def excess(s: float) -> float:
        a, b = sensitivity / (2 * s), epsilon * s / sensitivity
        return stats.norm.cdf(a - b) - math.exp(epsilon) * stats.norm.cdf(-a - b) - delta

    return float(optimize.brentq(excess, 1e-6, 1e6, xtol=1e-12))


class StandaloneGateway:
    def __init__(self, mode: str = "correct", seed: int = 0) -> None:
        if mode not in MODES:
            raise ValueError(mode)
        self.mode = mode
        self.rng = np.random.default_rng(seed)
        self.datasets: dict[str, dict] = {}
        self.ids = itertools.count(1)
        self.lock = threading.Lock()
        self.requests = 0
        self.prompts = 0
        gw = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):  # quiet
                pass

            def _send(self, code: int, body: dict) -> None:
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))) or b"{}")
                with gw.lock:
                    gw.requests += 1
                    if self.path == "/v1/datasets":
                        ds_id = f"ds_{next(gw.ids)}"
                        gw.datasets[ds_id] = body
                        return self._send(201, {"id": ds_id})
                    if self.path == "/v1/private/classify":
                        return self._send(200, gw.classify(body))
                return self._send(404, {"error": {"message": "not found", "param": None}})

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> StandaloneGateway:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()

    def classify(self, body: dict) -> dict:
        ds = self.datasets[body["dataset_id"]]
        labels = ds["labels"]
        ex = [(e["input"], e["output"]) for e in ds["exemplars"]]
        eps, delta = float(body["epsilon"]), float(body["delta"])
        parts = int(body.get("partitions") or 4)
        self.prompts += parts  # the prompts a model behind a real gateway would answer
        shots = int(body.get("shots_per_partition") or max(1, len(ex) // parts))
        order = self.rng.permutation(len(ex))[: parts * shots]
        if self.mode == "non_private":  # one prompt holding every exemplar
            parts, shots, order = 1, len(ex), np.arange(len(ex))
        votes = np.zeros(len(labels))
        for p in range(parts):
            unit = [ex[i] for i in order[p * shots:(p + 1) * shots]]
            copied = [lab for text, lab in unit if text and text in body["query"]]
            vote = copied[0] if copied else Counter(lab for _, lab in unit).most_common(1)[0][0]
            votes[labels.index(vote)] += 1
        sigma = analytic_gaussian_sigma(eps, delta)
        z = self.rng.standard_normal(len(labels)) * sigma
        if self.mode == "sigma_quarter":
            z = z / 4
        elif self.mode == "winner_only":
            z = np.where(np.arange(len(labels)) == np.argmax(votes), z, 0.0)
        elif self.mode in ("no_noise", "swapped_no_noise", "non_private"):
            z = np.zeros(len(labels))
        noisy = votes + z
        won = int(np.argmax(noisy))
        if self.mode == "swapped_no_noise" and len(labels) == 2:
            won = 1 - won
        out = {"label": labels[won],
               "privacy": {"epsilon": eps, "delta": delta, "adjacency": "replace-one", "mechanism": "rnm"}}
        if body.get("return_internals"):
            out["internals"] = {"clean_votes": votes.tolist(), "noisy_votes": noisy.tolist()}
        return out
