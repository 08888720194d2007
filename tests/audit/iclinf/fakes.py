"""Fake models whose outputs are known functions of the prompt (arithmetic tests only)."""

from __future__ import annotations

import re

import numpy as np


class CountingLM:
    """Label log-scores = weight x (number of demonstrations with that label), read from the prompt text.

    The label distribution of S is softmax(weight * counts(S)), independent of the query, so ICLInf has
    a closed form. Implements only what the plain path of ``score_family`` calls."""

    name = "counting-fake"

    def __init__(self, labels, output_prefix="Label:", weight=1.0, query_bonus=0.0):
        self.labels = list(labels)
        self.output_prefix = output_prefix
        self.weight = weight
        self.query_bonus = query_bonus
        self.calls = 0

    def _scores(self, prompt: str) -> np.ndarray:
        # Demonstration lines "Label: x" (the query block ends in "Label:" with nothing after it).
        found = re.findall(re.escape(self.output_prefix) + r" (\w+)", prompt)
        counts = np.array([found.count(lab) for lab in self.labels], dtype=float)
        query = prompt.rsplit("\n\n", 1)[-1]
        bonus = np.array([self.query_bonus if lab in query else 0.0 for lab in self.labels])
        return self.weight * counts + bonus

    def continuation_logprobs(self, prompts, continuations):
        self.calls += 1
        conts = [c.strip() for c in continuations]
        idx = [self.labels.index(c) for c in conts]
        out = np.stack([self._scores(p)[idx] for p in prompts])
        return out - 3.0  # un-normalised on purpose: the label distribution renormalises

    def next_token_logprobs(self, prompts):
        # Vocabulary: the labels, then two filler tokens with fixed logits.
        self.calls += 1
        rows = []
        for p in prompts:
            z = np.concatenate([self._scores(p), [0.5, -1.0]])
            rows.append(z - np.log(np.exp(z).sum()))
        return np.array(rows, dtype=np.float32)


class _Session:
    def __init__(self, lm, n):
        self.lm = lm
        self.n = n
        self.t = 0
        self.logits = lm.logits_at(0, n)

    def step(self, token):
        self.t += 1
        self.logits = self.lm.logits_at(self.t, self.n)
        return self.logits

    def close(self):
        pass


class RandomDecodeLM:
    """start_decode/step with seeded random (s, V) logits, different per step (decoding audit arithmetic)."""

    name = "random-decode-fake"
    eos_token_ids = frozenset()

    def __init__(self, vocab=12, scale=6.0, seed=0):
        self.vocab = vocab
        self.scale = scale
        self.seed = seed

    def logits_at(self, t, n):
        g = np.random.default_rng([self.seed, t, n])
        return (g.normal(size=(n, self.vocab)) * self.scale).astype(np.float32)

    def start_decode(self, prompts):
        return _Session(self, len(prompts))

    def detokenize(self, ids, skip_special_tokens=True):
        return " ".join(str(i) for i in ids)
