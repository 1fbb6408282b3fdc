"""Every command's and option's help says what it does in words a wheel user can act on.

Why: `--help` is the manual a user has at hand; help that ends mid-sentence, leaves a default unexplained, or
points at a file of the repository (which an installed wheel lacks) sends them looking for what is not there.
"""

from __future__ import annotations

import argparse
import re

from wandb_rlcluster.cli import build_parser

#: Words a sentence cannot end on; help ending on one was cut off.
DANGLING = {"a", "an", "and", "as", "by", "for", "from", "in", "of", "on", "or", "over", "the", "to", "with",
            "than", "is", "are", "its", "their", "e.g."}
#: A path into the repository: a folder of the checkout, or a source/markdown file.
REPO_PATH = re.compile(r"\b(?:src|tests|benchmarks|docs|panels|build_backend)/|\b[\w/-]+\.(?:md|py)\b")


def walk(parser: argparse.ArgumentParser, prefix: tuple[str, ...] = ("rlcluster",)):
    """(command, action) for every option and positional of every command and subcommand."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help for a in action._choices_actions}
            for name, sub in action.choices.items():
                yield (*prefix, name), argparse.Action([], name, help=helps.get(name))
                yield from walk(sub, (*prefix, name))
        elif not isinstance(action, argparse._HelpAction):
            yield prefix, action


def problems(command: tuple[str, ...], action: argparse.Action) -> list[str]:
    where = f"{' '.join(command)} {'/'.join(action.option_strings) or action.dest}"
    text = " ".join((action.help or "").split())
    if not text:
        return [f"{where}: no help"]
    out = []
    last = re.sub(r"[^\w.()-]+$", "", text.rsplit(" ", 1)[-1]).lower()
    if text.endswith((",", ";", ":", "(", "...", "-")) or last in DANGLING:
        out.append(f"{where}: help ends mid-sentence: ...{text[-40:]!r}")
    if text.count("(") != text.count(")") or text.count("`") % 2:
        out.append(f"{where}: unbalanced brackets or quotes")
    # a default of the option's own (rules --markdown writes into docs/rules in a checkout) may be named as such
    own = {str(v) for v in (action.default, action.const) if isinstance(v, str)}
    scrubbed = text
    for v in own:
        scrubbed = scrubbed.replace(v, "")
    if REPO_PATH.search(scrubbed):
        out.append(f"{where}: names a repository path a wheel user does not have: {REPO_PATH.search(scrubbed)[0]}")
    default = action.default
    if (action.option_strings and default not in (None, False, True, argparse.SUPPRESS, [], 0.0) and
            "default" not in text.lower()):
        out.append(f"{where}: default {default!r} unexplained")
    return out


def test_every_command_and_option_has_complete_help():
    found = [p for command, action in walk(build_parser()) for p in problems(command, action)]
    assert not found, "\n".join(found)


def test_the_check_catches_what_it_is_for():
    """The checks fail on the defects they exist for (a help cut off, a repository path, a silent default)."""
    cut = argparse.Action(["--map"], "map", help="it wins over the --alerts file's keys:")
    repo = argparse.Action(["--warn-sooner"], "w", help="more false ones (benchmarks/detection/FRONTIER.md)")
    silent = argparse.Action(["--out"], "out", default="demo-out", help="the folder for the run")
    assert problems(("x",), cut) and problems(("x",), repo) and problems(("x",), silent)
    assert not problems(("x",), argparse.Action(["--out"], "out", default="d", help="a folder (default: d)"))


def test_dashboard_takes_several_runs(tmp_path, capsys):
    """`rlcluster dashboard wandb/offline-run-*/`: a glob the shell expands to several runs writes one page each."""
    import json

    from wandb_rlcluster.cli import main

    runs = []
    for name in ("run-a", "run-b"):
        folder = tmp_path / name
        folder.mkdir()
        rows = [{"step": s, "loss": 1.0 / s, "grad_norm": 0.5, "learning_rate": 1e-5} for s in range(1, 40)]
        (folder / "trainer_state.json").write_text(json.dumps({"log_history": rows}), encoding="utf-8")
        runs.append(str(folder / "trainer_state.json"))
    out = tmp_path / "dash.html"
    assert main(["dashboard", *runs, "--out", str(out)]) == 0
    written = sorted(p.name for p in tmp_path.glob("dash-*.html"))
    assert written == ["dash-run-a-trainer_state.html", "dash-run-b-trainer_state.html"], written
    assert capsys.readouterr().out.count("wrote ") == 2
