"""The one YAML loader for configuration files (``alerts.yaml``, the panel layouts).

PyYAML's ``safe_load`` refuses to build Python objects, but it still lets a file people wrote (or
pasted) do harm: a 1 KB "billion laughs" of nested aliases expands to gigabytes, a Python tag ends
in a ConstructorError traceback, and a key written twice silently keeps the last value (``severity:
stop`` then ``severity: info`` is an info rule). Here the document is composed (a node graph, with
aliases still shared), checked, and only then turned into values:

* the text is at most :data:`MAX_YAML_CHARS` long (PyYAML composes ~100 KB a second: the limit keeps
  the worst file under ~2 s) and holds at most :data:`MAX_VALUES` values, counted while composing;
* the node graph may not contain a cycle, and expanded through its aliases it may hold at most
  :data:`MAX_NODES` nodes;
* only the standard YAML tags are accepted (``!!python/...`` and custom tags are refused);
* a mapping may not repeat a key (compared as values: ``yes`` and ``true`` are the same key), and its
  keys must be plain scalars;
* every scalar must construct (``!!int abc`` is a problem at its line, not a ValueError later), and a
  number is at most :data:`MAX_NUMBER_CHARS` long (PyYAML's base-60 integers ``1:0:0:...`` take
  quadratic time).

Merge keys (``<<: *defaults``) work as in YAML 1.1: explicit keys override merged ones.
Problems come back as ``(line, message)`` pairs so each caller can prefix its file name.
"""

from __future__ import annotations

from typing import Any

import yaml

from .core.text import clean_text

__all__ = ["MAX_NODES", "MAX_NUMBER_CHARS", "MAX_VALUES", "MAX_YAML_CHARS", "YamlProblem", "compose_checked",
           "construct", "load_checked"]

#: Longest configuration text accepted (characters); the shipped alerts.yaml is ~8 KB.
MAX_YAML_CHARS = 128 * 1024
#: Most values (nodes, aliases included) a document may hold as written (the shipped rules have ~700).
MAX_VALUES = 10_000
#: Most nodes a document may hold once its aliases are expanded.
MAX_NODES = 100_000
#: Longest number: a threshold needs a few digits, and PyYAML reads base-60 integers in quadratic time.
MAX_NUMBER_CHARS = 100

_STD = "tag:yaml.org,2002:"
_ALLOWED_TAGS = frozenset(_STD + t for t in ("null", "bool", "int", "float", "str", "binary", "timestamp", "seq",
                                             "map", "merge", "set", "omap", "pairs"))


class YamlProblem(ValueError):
    """A YAML document that was refused; ``problems`` holds ``(line, message)`` pairs."""

    def __init__(self, problems: list[tuple[int, str]]) -> None:
        super().__init__("; ".join(f"line {line}: {msg}" for line, msg in problems))
        self.problems = problems


class _TooManyValues(Exception):
    def __init__(self, line: int) -> None:
        super().__init__(line)
        self.line = line


class _CountingLoader(yaml.SafeLoader):
    """The safe loader's composer, counting values as it composes so a huge file stops early."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.values = 0

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        self.values += 1
        if self.values > MAX_VALUES:
            event = self.peek_event()
            raise _TooManyValues(event.start_mark.line + 1 if event.start_mark is not None else 1)
        return super().compose_node(parent, index)


def _line(node: yaml.Node) -> int:
    return node.start_mark.line + 1 if node.start_mark is not None else 1


def _tag(tag: str) -> str:
    return clean_text("!!" + tag[len(_STD):] if tag.startswith(_STD) else tag, 80)


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    return []


def compose_checked(text: str) -> tuple[yaml.Node | None, list[tuple[int, str]]]:
    """The checked node graph of ``text`` (None for an empty document) and the problems found.

    When problems are returned the node is None: nothing of a refused document should be used.
    """
    if len(text) > MAX_YAML_CHARS:
        return None, [(1, f"the file is {len(text):,} characters long; a configuration over "
                          f"{MAX_YAML_CHARS:,} is refused (is it the right file?)")]
    try:
        root = yaml.compose(text, Loader=_CountingLoader)
    except _TooManyValues as e:
        return None, [(e.line, f"the YAML holds more than {MAX_VALUES:,} values; a configuration is far smaller "
                               "(is it the right file?)")]
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        # e.problem only: str(e) quotes the offending line, which may hold a pasted secret
        what = clean_text(e.problem or e.context or "malformed YAML", 200)
        return None, [(mark.line + 1 if mark else 1, f"invalid YAML: {what}; check indentation and quoting "
                                                       "around this line")]
    except yaml.reader.ReaderError as e:  # a character YAML does not allow (a control character, say)
        line = text.count("\n", 0, max(0, e.position)) + 1
        char = clean_text(chr(e.character) if isinstance(e.character, int) else e.character)
        return None, [(line, f"invalid YAML: the character '{char}' is not allowed in YAML; remove it")]
    except yaml.YAMLError as e:
        return None, [(1, f"invalid YAML: {clean_text(type(e).__name__)}")]
    except RecursionError:
        return None, [(1, "the YAML is nested too deeply to be a configuration")]
    if root is None:
        return None, []
    problems = _check_graph(root)
    if problems:
        return None, problems
    problems = _flatten_merges(root)
    return (None, problems) if problems else (root, [])


def _check_graph(root: yaml.Node) -> list[tuple[int, str]]:
    """Cycles, expanded size, tags, keys and scalars: one iterative walk over the distinct nodes."""
    size: dict[int, int] = {}
    on_path: set[int] = set()
    problems: list[tuple[int, str]] = []
    constructor = yaml.SafeLoader("")
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        nid = id(node)
        if done:
            on_path.discard(nid)
            total = 1 + sum(size[id(c)] for c in _children(node))
            if total > MAX_NODES:
                return [(_line(node), f"the YAML expands to more than {MAX_NODES:,} values through its aliases "
                                      "(&anchor / *alias): a 'billion laughs' document? write the values out")]
            size[nid] = total
            continue
        if nid in size:
            continue
        if nid in on_path:
            return [(_line(node), "an alias refers to a node that contains it (a recursive YAML structure)")]
        on_path.add(nid)
        stack.append((node, True))
        problem = _check_node(node, constructor)
        if problem:
            problems.append(problem)
        for child in _children(node):
            if id(child) not in size:
                stack.append((child, False))
    return problems


def _check_node(node: yaml.Node, constructor: yaml.SafeLoader) -> tuple[int, str] | None:
    """(line, problem) for one node, or None."""
    if node.tag not in _ALLOWED_TAGS:
        return _line(node), (f"the tag {_tag(node.tag)} is not allowed: a configuration holds plain values (strings, "
                             "numbers, lists, mappings); remove the tag")
    if isinstance(node, yaml.ScalarNode):
        if node.tag == _STD + "merge":  # the '<<' key itself
            return None
        return _scalar_problem(node, constructor)
    if isinstance(node, yaml.MappingNode):
        first: dict[object, int] = {}
        for key, _ in node.value:
            if not isinstance(key, yaml.ScalarNode):
                return _line(key), "a mapping key must be a plain word, not a list or a mapping"
            if key.tag == _STD + "merge":
                continue
            ident = _key_identity(key, constructor)
            if ident in first:
                return _line(key), (f"duplicate key {clean_text(key.value, 60)!r} (first at line {first[ident]}); "
                                    "YAML would silently keep only the last one: remove or rename one of them")
            first[ident] = _line(key)
    return None


def _scalar_problem(node: yaml.ScalarNode, constructor: yaml.SafeLoader) -> tuple[int, str] | None:
    if node.tag in (_STD + "int", _STD + "float") and len(node.value) > MAX_NUMBER_CHARS:
        return _line(node), (f"this number is {len(node.value):,} characters long; write it with at most "
                             f"{MAX_NUMBER_CHARS} (or quote it if it is meant as text)")
    try:
        constructor.construct_object(node)
    except Exception:  # noqa: BLE001 - ValueError for "!!int abc", ConstructorError for bad base64 ...
        return _line(node), f"this value cannot be read as {_tag(node.tag)}; remove the tag or fix the value"
    return None


def _key_identity(key: yaml.ScalarNode, constructor: yaml.SafeLoader) -> object:
    """What a key means, not how it is written: ``yes``/``true`` and ``~``/``null`` are the same key to YAML."""
    if _scalar_problem(key, constructor) is None:
        value = constructor.construct_object(key)
        try:
            hash(value)
        except TypeError:
            pass
        else:
            return ("value", value)  # equal as dict keys: 1, 1.0 and true collide in the mapping YAML builds
    return ("text", key.tag, key.value)


def _flatten_merges(root: yaml.Node) -> list[tuple[int, str]]:
    """Resolve ``<<`` merge keys in place; an explicit key overrides a merged one."""
    loader = yaml.SafeLoader("")
    seen: set[int] = set()
    stack = [root]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, yaml.MappingNode) and any(k.tag == _STD + "merge" for k, _ in node.value):
            try:
                loader.flatten_mapping(node)
            except yaml.YAMLError as e:
                return [(_line(node), f"invalid merge key (<<): {clean_text(getattr(e, 'problem', '') or e, 200)}")]
            last = {(k.tag, k.value): i for i, (k, _) in enumerate(node.value)}
            node.value = [pair for i, pair in enumerate(node.value) if last[(pair[0].tag, pair[0].value)] == i]
        stack.extend(_children(node))
    return []


def construct(node: yaml.Node) -> Any:
    """The Python value of a node from :func:`compose_checked` (safe constructors only)."""
    return yaml.SafeLoader("").construct_object(node, deep=True)


def load_checked(text: str) -> Any:
    """``yaml.safe_load`` with the checks above; raises :class:`YamlProblem`."""
    node, problems = compose_checked(text)
    if problems:
        raise YamlProblem(problems)
    return None if node is None else construct(node)
