"""Build script: pure Python by default; ``RLCLUSTER_COMPILE=1`` compiles the instrument core with mypyc.

The core (``src/wandb_rlcluster/core``) is typed and checked by mypy, so mypyc can compile it to C extension modules
unchanged: about 4x faster per row (``docs/performance.md``). A compiled wheel carries the ``.py`` files too; the
``.so`` beside each is imported first. An editable install is never compiled (a stale ``.so`` would shadow the
source being edited). Build one with ``make compiled`` (needs a C compiler and mypy, both in the dev venv), or
``RLCLUSTER_COMPILE=1 pip wheel --no-build-isolation --no-deps .``.
"""

from __future__ import annotations

import os
import sys

from setuptools import setup

# The modules a row goes through (catalog.py reads the gauges' sources and is not on the row path; __init__ is lazy).
COMPILED = [
    "bounded", "build", "cluster", "diagnosis", "doc_links", "entropy", "fields", "findings", "frameworks",
    "fundamentals", "gauge",
    "keymap", "keys", "kl", "length", "policy_ratio", "reward", "reward_progress", "reward_signal", "rollouts",
    "rule", "sanity", "sequential", "stats", "streams", "text",
]


def _ext_modules() -> list:
    if os.environ.get("RLCLUSTER_COMPILE", "") not in ("1", "true", "yes"):
        return []
    if not {"bdist_wheel", "build_ext", "build", "install"} & set(sys.argv[1:]):
        return []  # the metadata step (egg_info, dist_info): mypyc's code generation only where it is built
    from mypyc.build import mypycify  # only a compiled build needs mypy

    return mypycify([f"src/wandb_rlcluster/core/{m}.py" for m in COMPILED], opt_level="3")


setup(ext_modules=_ext_modules())
