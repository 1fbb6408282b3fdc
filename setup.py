"""Build script: pure Python by default; ``RLCLUSTER_COMPILE=1`` compiles the instrument core with mypyc.

The core (``src/wandb_rlcluster/core``) is typed and checked by mypy, so mypyc can compile it to C extension modules
unchanged: about 4x faster per row (``docs/performance.md``). A compiled wheel carries the ``.py`` files too; the
``.so`` beside each is imported first. An editable install is never compiled (a stale ``.so`` would shadow the
source being edited). Build one with ``make compiled`` (needs a C compiler and mypy, both in the dev venv), or
``RLCLUSTER_COMPILE=1 pip wheel --no-build-isolation --no-deps .``; ``MYPYC_OPT_LEVEL=0`` compiles the same C
unoptimised (what CI checks, in a fraction of the time).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from setuptools import setup

# Every core module but the two off the row path: __init__ (lazy) and catalog.py (it reads the gauges' sources).
NOT_COMPILED = {"__init__.py", "catalog.py"}


def _ext_modules() -> list:
    if os.environ.get("RLCLUSTER_COMPILE", "") not in ("1", "true", "yes"):
        return []
    if not {"bdist_wheel", "build_ext", "build", "install"} & set(sys.argv[1:]):
        return []  # the metadata step (egg_info, dist_info): mypyc's code generation only where it is built
    from mypyc.build import mypycify  # only a compiled build needs mypy

    core = Path(__file__).resolve().parent / "src" / "wandb_rlcluster" / "core"
    modules = sorted(f"src/wandb_rlcluster/core/{p.name}" for p in core.glob("*.py") if p.name not in NOT_COMPILED)
    # MYPYC_OPT_LEVEL: the C compiler's -O (a release: 3, the default; CI checks the findings at 0, which compiles in
    # a fraction of the time: the C is the same, only the compiler's optimisation differs)
    return mypycify(modules, opt_level=os.environ.get("MYPYC_OPT_LEVEL", "3"))


setup(ext_modules=_ext_modules())
