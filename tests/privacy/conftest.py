"""Shared helpers for the privacy tests. dp-accounting is a test-only oracle."""

from __future__ import annotations

import numpy as np
import pytest

dpa = pytest.importorskip("dp_accounting")
from dp_accounting.rdp import rdp_privacy_accountant as dpa_rdp

DPA_ORDERS = np.array(dpa_rdp.DEFAULT_RDP_ORDERS, dtype=float)


@pytest.fixture(scope="session")
def dpa_orders() -> np.ndarray:
    return DPA_ORDERS.copy()
