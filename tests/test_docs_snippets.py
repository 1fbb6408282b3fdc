"""Every code block of the manual is checked the way a user would meet it, so a pasted snippet cannot fail on a
name, an argument or a flag that does not exist.

Why: a snippet that raises AttributeError or "unrecognized arguments" at the moment someone follows the manual is
worse than no snippet. Each ```python, ```bash, ```console and ```yaml block outside the generated rule pages
(tests/test_rule_pages.py runs those) and getting-started.md (tests/test_docs.py runs its blocks in a fresh
directory) is checked here: YAML through the product's own loader; Python compiled, every name it takes from
wandb_rlcluster imported and every keyword it passes to a wandb_rlcluster callable checked against the signature,
and the blocks that need nothing but the package executed; shell lines parsed by the CLI's own argument parser,
make targets found in the Makefile, scripts and modules found. A block that cannot be checked says why:
``<!-- docs-test: skip: why -->`` on the line before it.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import re
import shlex
from pathlib import Path
from types import SimpleNamespace

import pytest

import wandb_rlcluster
from wandb_rlcluster.alerts.config import load_config
from wandb_rlcluster.cli import build_parser
from wandb_rlcluster.core.build import core_build
from wandb_rlcluster.core.catalog import EXAMPLES

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
FENCE = re.compile(r"^```(\w*)\n(.*?)^```$", re.S | re.M)
SKIP = re.compile(r"<!-- docs-test: skip: (.+?) -->")
CHECKED = ("python", "bash", "console", "yaml")
# Blocks that need nothing but the package and a log: run with `trainer` a finished Trainer's stand-in.
RUN = {"python.md"}


def blocks() -> list[tuple[str, int, str, str]]:
    """(page, index, language, code) of every checked block; a block marked skip must say why."""
    out = []
    for page in sorted(DOCS.rglob("*.md")):
        rel = page.relative_to(DOCS).as_posix()
        if rel.startswith("rules/") or rel == "getting-started.md":
            continue
        text = page.read_text(encoding="utf-8")
        for n, m in enumerate(FENCE.finditer(text)):
            before = text[: m.start()].rstrip("\n").rsplit("\n", 1)[-1].strip()
            skip = SKIP.fullmatch(before)
            if skip:
                assert len(skip[1].strip()) > 10, f"{rel}: a skipped block must say why"
                continue
            if m[1] in CHECKED:
                out.append((rel, n, m[1], m[2]))
    return out


BLOCKS = blocks()


def test_the_manual_has_checked_blocks_of_every_kind():
    kinds = {lang for _, _, lang, _ in BLOCKS}
    assert set(CHECKED) <= kinds and len(BLOCKS) >= 20


# -- Python ------------------------------------------------------------------------------------------------------------


def _package_names(tree: ast.AST) -> dict[str, object]:
    """The names a snippet binds from wandb_rlcluster (``import wandb_rlcluster``, ``from wandb_rlcluster[.x] import
    y``), each resolved now: a missing one fails here as it would for the reader."""
    names: dict[str, object] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] == "wandb_rlcluster":
                    names[a.asname or a.name.split(".")[0]] = importlib.import_module(a.name)
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "wandb_rlcluster":
            mod = importlib.import_module(node.module or "")
            for a in node.names:
                names[a.asname or a.name] = getattr(mod, a.name)
    return names


def _callee(node: ast.expr, names: dict[str, object]) -> object | None:
    if isinstance(node, ast.Name):
        return names.get(node.id)
    if isinstance(node, ast.Attribute):
        base = _callee(node.value, names)
        if base is not None and inspect.ismodule(base):
            return getattr(base, node.attr)  # AttributeError here is the reader's AttributeError
    return None


@pytest.mark.parametrize("page,n,lang,code", [b for b in BLOCKS if b[2] == "python"],
                         ids=lambda v: v if isinstance(v, str) and v.endswith(".md") else None)
def test_python_blocks_use_names_and_arguments_that_exist(page, n, lang, code):
    tree = ast.parse(code, f"docs/{page}")
    names = _package_names(tree)
    if "RLClusterCallback" in code and "RLClusterCallback" not in names:  # the pages' TRL snippets assume it
        names["RLClusterCallback"] = wandb_rlcluster.RLClusterCallback
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        fn = _callee(node.func, names)
        if fn is None or not callable(fn):
            continue
        try:
            params = inspect.signature(fn).parameters
        except ValueError:  # a compiled function (make test-compiled) may carry no signature; the pure run checks it
            if core_build() == "compiled":
                continue
            raise
        if any(p.kind is p.VAR_KEYWORD for p in params.values()):
            continue
        for kw in node.keywords:
            assert kw.arg is None or kw.arg in params, f"docs/{page}: {ast.unparse(node.func)}() has no {kw.arg!r}"
    if page in RUN:
        rows = EXAMPLES[("kl", "kl-warn")].rows(True)
        trainer = SimpleNamespace(state=SimpleNamespace(log_history=rows))
        exec(compile(tree, f"docs/{page}", "exec"), {"trainer": trainer, "print": lambda *a: None})


def test_the_verl_recipe_calls_a_function_the_package_has():
    """The recipe once called wandb_rlcluster.watch_on_init, which only the watcher module had (AttributeError)."""
    assert "wandb_rlcluster.watch_on_init(" in (DOCS / "frameworks.md").read_text(encoding="utf-8")
    params = inspect.signature(wandb_rlcluster.watch).parameters
    assert {"framework", "on_stop"} <= set(params)
    assert callable(wandb_rlcluster.watch_on_init)


# -- YAML --------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("page,n,lang,code", [b for b in BLOCKS if b[2] == "yaml"],
                         ids=lambda v: v if isinstance(v, str) and v.endswith(".md") else None)
def test_yaml_blocks_are_alerts_files_the_loader_accepts(page, n, lang, code, tmp_path):
    f = tmp_path / "alerts.yaml"
    f.write_text(code, encoding="utf-8")
    load_config(f)  # ConfigError names the line and the fix


# -- shell -------------------------------------------------------------------------------------------------------------


def _commands(lang: str, code: str) -> list[list[str]]:
    """The commands of a block: console blocks' ``$`` lines, every line of a bash block, continuation lines joined."""
    lines = code.replace("\\\n", " ").splitlines()
    if lang == "console":
        lines = [x[2:] for x in lines if x.startswith("$ ")]
    out = []
    for line in lines:
        words = shlex.split(line, comments=True)
        while words and re.fullmatch(r"[A-Z_]+=\S*", words[0]):
            env, _, value = words.pop(0).partition("=")
            if value.startswith("wandb_rlcluster"):
                importlib.import_module(value)  # VERL_USE_EXTERNAL_MODULES=wandb_rlcluster.verl_plugin
        if words:
            out.append(words[: words.index("|")] if "|" in words else words)
    return out


@pytest.mark.parametrize("page,n,lang,code", [b for b in BLOCKS if b[2] in ("bash", "console")],
                         ids=lambda v: v if isinstance(v, str) and v.endswith(".md") else None)
def test_shell_blocks_name_commands_flags_and_files_that_exist(page, n, lang, code):
    parser = build_parser()
    targets = set(re.findall(r"^([\w-]+):", (ROOT / "Makefile").read_text(encoding="utf-8"), re.M))
    commands = _commands(lang, code)
    assert commands, f"docs/{page}: a shell block with no command"
    for words in commands:
        prog, args = words[0], words[1:]
        if prog in ("rlcluster", ".venv/bin/rlcluster"):
            try:
                parser.parse_args(args)
            except SystemExit as e:
                pytest.fail(f"docs/{page}: `{shlex.join(words)}` is refused by rlcluster's parser (exit {e.code})")
        elif prog == "make":
            assert all(t in targets for t in args if "=" not in t), f"docs/{page}: {shlex.join(words)}"
        elif prog == "python":
            if args[:2] == ["-m", "pytest"]:
                files = [a for a in args[2:] if a.endswith(".py")]
            elif args[:1] == ["-m"]:
                importlib.util.find_spec(args[1].split(".")[0])  # a module of the framework's, e.g. verl
                continue
            else:
                files = args[:1]
            for f in files:
                assert (ROOT / f).is_file(), f"docs/{page}: {f} does not exist"
        else:
            pytest.fail(f"docs/{page}: no check for `{prog}`; check it here or mark the block skip with a reason")
