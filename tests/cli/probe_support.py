"""Paths and constants shared by the rdma-probe CLI tests and their fixtures."""

from __future__ import annotations

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
SHIPPED_PERSONALITIES = REPO_ROOT / "tools" / "personalities"

# Short MPA waits so failure cases end in well under a second.
QUICK_TIMEOUTS = {"request_timeout_ms": 1500, "reply_timeout_ms": 1500, "rtr_timeout_ms": 400}
