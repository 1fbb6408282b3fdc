"""Where the real public logs live, and the manifest of real logs found since they were last copied there.

Real logs are copies of files from other public repositories, so the project never holds them: they sit beside the
checkout in ``../shared/real-logs/`` (``RLCLUSTER_REAL_LOGS`` overrides it, e.g. ``/nonexistent`` to see the
suite's behaviour on a user's clone, where the folder is absent). Tests and benchmarks read them through
``real_logs_root`` and skip, or leave a row out, with a one-line reason when a file is not there.

Logs found since are listed, not copied, in this folder's ``*.json`` manifests: each a JSON list of entries
``{id, repo, commit, path, sha256, framework, family, reading, expected}`` and, optionally, ``expected_rules`` (rules
that must fire), ``map`` (which logged key is which quantity, for a custom loop: ``rlcluster analyze --map``),
``expected_diagnosis``, ``file`` (the copy's name), ``rows``, ``known_miss`` (why the product does not yet give the
expected verdict: the verdict check is then a strict xfail, so the day it passes the entry must be updated) and
``split`` (``tuning`` or ``sealed``, fixed before anyone read the log: a sealed log is judged by the product once, at
the end, and by nothing before -- see ``in_split``).
Their copies sit in ``<real logs>/new/`` (``RLCLUSTER_EXTRA_LOGS`` overrides it), named
``<framework>/<id><suffix>`` by convention; a file is found by that name, by its original file name, or by
its content hash, whichever layout the copier used.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
MANIFEST_DIR = Path(__file__).resolve().parent
REAL_LOGS_ENV = "RLCLUSTER_REAL_LOGS"
EXTRA_LOGS_ENV = "RLCLUSTER_EXTRA_LOGS"
FRAMEWORKS = ("TRL", "verl", "custom", "SFT", "preference", "OpenRLHF")
EXPECTED = ("healthy", "troubled")
REQUIRED = ("id", "repo", "commit", "path", "sha256", "framework", "family", "reading", "expected")
OPTIONAL = ("expected_rules", "map", "expected_diagnosis", "file", "rows", "known_miss", "split")
SPLITS = ("tuning", "sealed")
"""A held-out manifest's halves: ``tuning`` logs may be looked at and judged while rules change; ``sealed`` ones are
judged once, at the end (``real_logs_bench.py --split sealed``; the manifest test only with
``RLCLUSTER_SCORE_SEALED=1``)."""
SCORE_SEALED_ENV = "RLCLUSTER_SCORE_SEALED"


def real_logs_root() -> Path:
    """``$RLCLUSTER_REAL_LOGS``, else ``../shared/real-logs`` beside the repository root (read at each call, so a
    test or a benchmark run can point it elsewhere)."""
    override = os.environ.get(REAL_LOGS_ENV)
    return Path(override) if override else REPO.parent / "shared" / "real-logs"


def extra_logs_root() -> Path:
    """``$RLCLUSTER_EXTRA_LOGS``, else ``new/`` in the real-logs folder: where the manifests' files are copied."""
    override = os.environ.get(EXTRA_LOGS_ENV)
    return Path(override) if override else real_logs_root() / "new"


def real_log(*parts: str) -> Path:
    """A path under the real-logs folder (it may not exist: see ``absent``)."""
    return real_logs_root().joinpath(*parts)


def absent(path: Path) -> str | None:
    """None when ``path`` exists, else the one-line reason a test skips or a benchmark leaves it out."""
    if path.exists():
        return None
    return f"real log not present: {path} (set {REAL_LOGS_ENV} to the shared real-logs folder)"


def sha256_of(path: Path) -> str:
    """The file's SHA-256, hex (remembered per path, size and mtime: a lookup by hash reads each file once)."""
    st = path.stat()
    return _sha256(str(path), st.st_size, st.st_mtime_ns)


@lru_cache(maxsize=4096)
def _sha256(path: str, size: int, mtime_ns: int) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


@dataclass(frozen=True)
class Entry:
    """One real log listed in a manifest: where it came from, what a practitioner reads in it, what we expect."""

    id: str
    repo: str
    commit: str
    path: str
    sha256: str
    framework: str
    family: str
    reading: str
    expected: str
    expected_rules: tuple[str, ...] = ()
    map: dict[str, Any] | None = None
    expected_diagnosis: str = ""
    file: str = ""
    rows: int = 0
    known_miss: str = ""
    split: str = ""
    manifest: str = ""

    @property
    def suffix(self) -> str:
        """The original file's suffixes (``.log.gz``, ``.json``): the copy keeps them so the reader sniffs the same."""
        name = Path(self.path).name
        return "".join(Path(name).suffixes[-2:]) if name.endswith(".gz") else Path(name).suffix


def entry_problems(raw: Any) -> list[str]:
    """What is wrong with one manifest entry (empty when it is well formed)."""
    if not isinstance(raw, dict):
        return [f"an entry is a {type(raw).__name__}, not an object"]
    name = raw.get("id", "?")
    out = [f"{name}: missing {k}" for k in REQUIRED if not isinstance(raw.get(k), str) or not raw[k].strip()]
    if out:
        return out
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", raw["id"]):
        out.append(f"{name}: id must be letters, digits, '_', '.', '-' (it names the copy)")
    if not re.fullmatch(r"[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+", raw["repo"]):
        out.append(f"{name}: repo must be owner/name, not {raw['repo']!r}")
    if not re.fullmatch(r"[0-9a-f]{7,40}", raw["commit"]):
        out.append(f"{name}: commit must be a hex commit id, not {raw['commit']!r}")
    if not re.fullmatch(r"[0-9a-f]{64}", raw["sha256"]):
        out.append(f"{name}: sha256 must be 64 lowercase hex digits")
    if raw["framework"] not in FRAMEWORKS:
        out.append(f"{name}: framework {raw['framework']!r} is not one of {', '.join(FRAMEWORKS)}")
    if raw["expected"] not in EXPECTED:
        out.append(f"{name}: expected must be healthy or troubled, not {raw['expected']!r}")
    rules = raw.get("expected_rules", [])
    if not isinstance(rules, list) or not all(isinstance(r, str) and r for r in rules):
        out.append(f"{name}: expected_rules must be a list of rule names")
    if "split" in raw and raw["split"] not in SPLITS:
        out.append(f"{name}: split must be tuning or sealed, not {raw['split']!r}")
    if "map" in raw and not (isinstance(raw["map"], dict) and raw["map"]):
        out.append(f"{name}: map must be an object of quantity -> logged key")
    unknown = set(raw) - set(REQUIRED) - set(OPTIONAL)
    if unknown:
        out.append(f"{name}: unknown fields {sorted(unknown)}")
    return out


def load_manifest(path: Path) -> list[Entry]:
    """The entries of one manifest file; ValueError naming the file and every problem when it is malformed."""
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: not a readable JSON file ({exc})") from exc
    if not isinstance(raw, list):
        raise ValueError(f"{path}: a manifest is a JSON list of entries, not a {type(raw).__name__}")
    problems = [p for e in raw for p in entry_problems(e)]
    if problems:
        raise ValueError(f"{path}: " + "; ".join(problems))
    return [Entry(**{**e, "expected_rules": tuple(e.get("expected_rules", ())), "manifest": path.name}) for e in raw]


def load_manifests(directory: Path = MANIFEST_DIR) -> list[Entry]:
    """Every entry of every ``*.json`` manifest in ``directory``, in file then list order; ids unique across them."""
    entries = [e for p in sorted(directory.glob("*.json")) for e in load_manifest(p)]
    seen: dict[str, str] = {}
    for e in entries:
        if e.id in seen:
            raise ValueError(f"id {e.id!r} is listed in {seen[e.id]} and again in {e.manifest}")
        seen[e.id] = e.manifest
    return entries


def in_split(entry: Entry, split: str) -> bool:
    """Whether ``entry`` belongs to ``split`` (``tuning``, ``sealed`` or ``all``): a log listed without a split (the
    manifests before the held-out round) is a tuning log; a sealed one is only in ``sealed`` and ``all``."""
    if split == "all":
        return True
    return (entry.split or "tuning") == split


def locate(entry: Entry, root: Path | None = None) -> Path | None:
    """The entry's local copy under ``root`` (default ``extra_logs_root()``), or None.

    By name first (``<id><suffix>`` or the original file name, in any subfolder), so a copy with the wrong bytes is
    found and fails its hash check; else by content hash, whatever the copy was called.
    """
    root = extra_logs_root() if root is None else root
    if not root.is_dir():
        return None
    files = sorted(p for p in root.rglob("*") if p.is_file())
    named = [p for p in files if p.name in (entry.id + entry.suffix, entry.id, entry.file)]
    if not named:
        original = [p for p in files if p.name == Path(entry.path).name]
        named = original if len(original) == 1 else []  # trainer_state.json etc.: a name many runs share
    if named:
        return named[0]
    return next((p for p in files if sha256_of(p) == entry.sha256), None)


def alarm_rules(findings: list[dict[str, Any]]) -> set[str]:
    """The rules (``gauge/rule``) of the warn/stop findings in an analysis summary's ``findings``."""
    return {f"{f['gauge']}/{f['rule']}" for f in findings if f.get("severity") in ("warn", "stop")}


def rule_fired(expected: str, fired: set[str]) -> bool:
    """Whether ``expected`` (``rule`` or ``gauge/rule``) is among ``fired``; a name also covers its stricter variants
    (``entropy-collapse`` is met by ``entropy-collapse-persistent``)."""
    names = fired | {f.split("/", 1)[-1] for f in fired}
    return any(n == expected or n.startswith(expected + "-") for n in names)


def verdict_problems(entry: Entry, verdict: str, fired: set[str]) -> list[str]:
    """How the product's verdict on a listed log departs from the entry's expectation (empty when it agrees): a
    healthy log gets no warn or stop; a troubled one gets one, from every rule in ``expected_rules``."""
    if entry.expected == "healthy":
        return [f"healthy log judged {verdict}: {sorted(fired)}"] if verdict != "ok" else []
    out = [] if verdict in ("warn", "stop") else [f"troubled log judged {verdict}"]
    missing = [r for r in entry.expected_rules if not rule_fired(r, fired)]
    return out + ([f"expected rules did not fire: {missing} (fired: {sorted(fired)})"] if missing else [])
