"""A tiny, safe expression language for alert conditions: parsed here, never ``eval``-ed.

    kl > 0.5
    rlcluster/length/vs_baseline > 2 and completions/clipped_ratio > 0.2
    abs(`rewards/my-fn/mean` - reward) >= 0.1 or not (entropy > 0.5)

Names are metric keys as the trainer logs them (``kl``, ``completions/mean_length``,
``train/reward``) or rlcluster's derived values (``rlcluster/<gauge>/<name>``);
backticks quote a name with other characters. A comparison with a missing or
non-finite value is false, so a metric that is not logged never fires a rule.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

FUNCTIONS: dict[str, Callable[..., float]] = {"abs": abs, "min": min, "max": max}
_TOKEN = re.compile(
    r"\s*(?:(?P<num>\d+\.?\d*(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?)"
    r"|(?P<quoted>`[^`]*`)"
    r"|(?P<name>[A-Za-z_][A-Za-z0-9_./]*)"
    r"|(?P<op>>=|<=|==|!=|>|<|\+|-|\*|/|\(|\)|,))"
)
_COMPARE = {">": lambda a, b: a > b, "<": lambda a, b: a < b, ">=": lambda a, b: a >= b,
            "<=": lambda a, b: a <= b, "==": lambda a, b: a == b, "!=": lambda a, b: a != b}
_ARITH = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b,
          "/": lambda a, b: a / b if b else math.nan}
KEYWORDS = ("and", "or", "not")
#: Limits that keep parsing and evaluation bounded (a rule is a line, not a program): characters,
#: tokens, and nesting (parentheses, not, unary minus, calls) while parsing and in the parsed tree.
MAX_CHARS = 1000
MAX_TOKENS = 200
MAX_NESTING = 32
MAX_TREE_DEPTH = 64


class ExprError(ValueError):
    """A malformed expression; ``pos`` is the 0-based column."""

    def __init__(self, message: str, pos: int) -> None:
        super().__init__(message)
        self.pos = pos


@dataclass(frozen=True)
class Node:
    kind: str  # num | name | neg | not | and | or | cmp | arith | call
    value: object = None
    args: tuple[Node, ...] = ()


def _tokenize(text: str) -> list[tuple[str, str, int]]:
    out: list[tuple[str, str, int]] = []
    pos = 0
    text = text.rstrip()
    while pos < len(text):
        if len(out) >= MAX_TOKENS:
            raise ExprError(f"expression has more than {MAX_TOKENS} tokens; split it into several rules", pos)
        m = _TOKEN.match(text, pos)
        if not m or m.end() == pos:
            raise ExprError(f"unexpected character {text[pos:pos + 1]!r}", pos)
        kind = m.lastgroup or ""
        val = m.group(kind)
        start = m.start(kind)
        if kind == "name" and val in KEYWORDS:
            kind = "kw"
        elif kind == "quoted":
            kind, val = "name", val[1:-1]
            if not val:
                raise ExprError("empty `` name", start)
        out.append((kind, val, start))
        pos = m.end()
    out.append(("end", "", len(text)))
    return out


class _Parser:
    def __init__(self, text: str) -> None:
        self.toks = _tokenize(text)
        self.i = 0
        self.depth = 0

    def nest(self, pos: int) -> None:
        """One level deeper (parenthesis, not, minus, call): refused past MAX_NESTING, before Python's own
        recursion limit could turn it into a RecursionError."""
        self.depth += 1
        if self.depth > MAX_NESTING:
            raise ExprError(f"nested more than {MAX_NESTING} levels deep (parentheses, 'not', '-'); simplify it", pos)

    def peek(self) -> tuple[str, str, int]:
        return self.toks[self.i]

    def take(self) -> tuple[str, str, int]:
        t = self.toks[self.i]
        self.i += 1
        return t

    def expect(self, val: str) -> None:
        kind, v, pos = self.take()
        if v != val:
            raise ExprError(f"expected {val!r}, found {v or 'end of expression'!r}", pos)

    def parse(self) -> Node:
        node = self.or_()
        kind, v, pos = self.peek()
        if kind != "end":
            raise ExprError(f"unexpected {v!r} after a complete expression (missing 'and'/'or'?)", pos)
        return node

    def or_(self) -> Node:
        node = self.and_()
        while self.peek()[1] == "or" and self.peek()[0] == "kw":
            self.take()
            node = Node("or", None, (node, self.and_()))
        return node

    def and_(self) -> Node:
        node = self.not_()
        while self.peek()[1] == "and" and self.peek()[0] == "kw":
            self.take()
            node = Node("and", None, (node, self.not_()))
        return node

    def not_(self) -> Node:
        if self.peek()[0] == "kw" and self.peek()[1] == "not":
            self.nest(self.take()[2])
            node = Node("not", None, (self.not_(),))
            self.depth -= 1
            return node
        return self.cmp()

    def cmp(self) -> Node:
        left = self.sum()
        kind, v, pos = self.peek()
        if kind == "op" and v in _COMPARE:
            self.take()
            right = self.sum()
            if self.peek()[0] == "op" and self.peek()[1] in _COMPARE:
                raise ExprError("chained comparisons are not supported; use 'and'", self.peek()[2])
            return Node("cmp", v, (left, right))
        return left

    def sum(self) -> Node:
        node = self.product()
        while self.peek()[0] == "op" and self.peek()[1] in ("+", "-"):
            op = self.take()[1]
            node = Node("arith", op, (node, self.product()))
        return node

    def product(self) -> Node:
        node = self.unary()
        while self.peek()[0] == "op" and self.peek()[1] in ("*", "/"):
            op = self.take()[1]
            node = Node("arith", op, (node, self.unary()))
        return node

    def unary(self) -> Node:
        if self.peek()[1] == "-" and self.peek()[0] == "op":
            self.nest(self.take()[2])
            node = Node("neg", None, (self.unary(),))
            self.depth -= 1
            return node
        return self.atom()

    def atom(self) -> Node:
        kind, v, pos = self.take()
        if kind == "num":
            return Node("num", float(v))
        if kind == "name":
            if self.peek()[1] == "(" and self.peek()[0] == "op":
                if v not in FUNCTIONS:
                    raise ExprError(f"unknown function {v!r}; available: {', '.join(FUNCTIONS)}", pos)
                self.nest(self.take()[2])
                args = [self.sum()]
                while self.peek()[1] == ",":
                    self.take()
                    args.append(self.sum())
                self.expect(")")
                self.depth -= 1
                if v == "abs" and len(args) != 1:
                    raise ExprError("abs() takes one argument", pos)
                if v in ("min", "max") and len(args) < 2:
                    raise ExprError(f"{v}() compares two or more values, e.g. {v}(kl, 0.1); with one it never fires",
                                    pos)
                return Node("call", v, tuple(args))
            return Node("name", v)
        if v == "(":
            self.nest(pos)
            node = self.or_()
            self.expect(")")
            self.depth -= 1
            return node
        if kind == "end":
            raise ExprError("expression ends too early", pos)
        raise ExprError(f"unexpected {v!r}", pos)


@dataclass(frozen=True)
class Expression:
    """A parsed condition: ``evaluate(lookup)`` -> (true?, value of its first metric)."""

    text: str
    root: Node
    names: tuple[str, ...]

    def evaluate(self, lookup: Callable[[str], float | None]) -> tuple[bool, float | None]:
        first = lookup(self.names[0]) if self.names else None
        try:
            res = _eval(self.root, lookup)
        except (TypeError, ValueError, OverflowError, ZeroDivisionError, RecursionError):
            return False, first
        return (res is True), first

    def evaluate_mapping(self, values: Mapping[str, float]) -> tuple[bool, float | None]:
        return self.evaluate(values.get)


def parse(text: str) -> Expression:
    """Parse ``text``; raises ExprError with the column of the problem."""
    if not isinstance(text, str) or not text.strip():
        raise ExprError("empty expression", 0)
    if len(text) > MAX_CHARS:
        raise ExprError(f"expression is {len(text):,} characters long (at most {MAX_CHARS:,}); split it into several "
                        "rules", MAX_CHARS)
    root = _Parser(text).parse()
    if root.kind not in ("cmp", "and", "or", "not"):
        raise ExprError("a condition must compare something (e.g. 'kl > 0.5')", 0)
    names: list[str] = []
    stack = [(root, 1)]  # iterative: a long 'a + b + c ...' chain is a deep tree, evaluated recursively later
    while stack:
        n, depth = stack.pop()
        if depth > MAX_TREE_DEPTH:
            raise ExprError(f"expression is more than {MAX_TREE_DEPTH} operations deep; split it into several rules",
                            0)
        if n.kind == "name" and n.value not in names:
            names.append(str(n.value))
        stack.extend((a, depth + 1) for a in reversed(n.args))
    return Expression(text, root, tuple(names))


def _eval(n: Node, lookup: Callable[[str], float | None]) -> object:
    k = n.kind
    if k == "num":
        return n.value
    if k == "name":
        v = lookup(str(n.value))
        return v if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else None
    if k == "cmp":
        a, b = _eval(n.args[0], lookup), _eval(n.args[1], lookup)
        if a is None or b is None or isinstance(a, bool) or isinstance(b, bool):
            return None
        return _COMPARE[str(n.value)](a, b)
    if k == "and":
        a = _eval(n.args[0], lookup)
        return (a is True) and (_eval(n.args[1], lookup) is True)
    if k == "or":
        a = _eval(n.args[0], lookup)
        return (a is True) or (_eval(n.args[1], lookup) is True)
    if k == "not":
        a = _eval(n.args[0], lookup)
        return None if a is None else (a is not True)
    if k == "neg":
        a = _eval(n.args[0], lookup)
        return None if a is None or isinstance(a, bool) else -a  # type: ignore[operator]
    if k == "arith":
        a, b = _eval(n.args[0], lookup), _eval(n.args[1], lookup)
        if a is None or b is None or isinstance(a, bool) or isinstance(b, bool):
            return None
        return _ARITH[str(n.value)](a, b)
    if k == "call":
        args = [_eval(a, lookup) for a in n.args]
        if any(a is None or isinstance(a, bool) for a in args):
            return None
        return FUNCTIONS[str(n.value)](*args)
    raise ValueError(k)
