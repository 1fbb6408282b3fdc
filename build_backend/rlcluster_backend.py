"""setuptools' build backend, asking for mypy as well when ``RLCLUSTER_COMPILE=1`` (``setup.py`` compiles the core
with mypyc then), so that ``RLCLUSTER_COMPILE=1 pip install .`` works in pip's isolated build environment too."""

from __future__ import annotations

import os

from setuptools import build_meta as _setuptools
from setuptools.build_meta import *  # noqa: F403 - the backend is setuptools', hooks and all

# mypy (its mypyc) in the range the core is checked and compiled with, and numpy: mypyc type-checks the modules
# that import it
COMPILE_REQUIRES = ["mypy>=2.4,<2.5", "numpy>=1.24"]


def _compiling() -> bool:
    return os.environ.get("RLCLUSTER_COMPILE", "") in ("1", "true", "yes")


def get_requires_for_build_wheel(config_settings: dict[str, object] | None = None) -> list[str]:
    extra = COMPILE_REQUIRES if _compiling() else []
    return _setuptools.get_requires_for_build_wheel(config_settings) + extra
