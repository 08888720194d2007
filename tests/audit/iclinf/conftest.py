"""ICLInf tests: one torch thread while they run (the shared 2-core machine is oversubscribed, and
two spinning OpenMP threads are several times slower than one there); restored afterwards."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="package", autouse=True)
def _one_torch_thread():
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
