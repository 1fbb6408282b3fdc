"""Which build of the instrument core is running: pure Python, or compiled with mypyc (``setup.py``,
``RLCLUSTER_COMPILE=1``; about 4x faster per row, the same findings)."""

from __future__ import annotations

from . import gauge


def core_build() -> str:
    """``compiled`` when the gauges run as C extension modules, else ``pure Python``."""
    origin = getattr(gauge, "__file__", "") or ""
    return "compiled" if origin.endswith((".so", ".pyd")) else "pure Python"
