"""The instance attributes a statistic's or a gauge's checkpoint walks, the same whether the core is pure Python or
compiled with mypyc (``setup.py``): a compiled class has no ``__dict__`` and keeps no ``__slots__`` attribute, but
lists its attributes, its bases' included, in ``__mypyc_attrs__``."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

_UNSET = object()


def slot_names(obj: object) -> tuple[str, ...]:
    """A slotted class's field names: ``__slots__`` (pure Python) or ``__mypyc_attrs__`` (compiled)."""
    cls = type(obj)
    names: Any = getattr(cls, "__slots__", None)
    if names is None:
        names = getattr(cls, "__mypyc_attrs__", ())
    return (names,) if isinstance(names, str) else tuple(names)


def instance_items(obj: object) -> Iterator[tuple[str, Any]]:
    """``vars(obj).items()``, or on a compiled object each attribute that is set (an unset one is skipped, as
    ``vars`` would not list it)."""
    try:
        yield from vars(obj).items()
        return
    except TypeError:  # compiled: no __dict__
        pass
    for k in getattr(type(obj), "__mypyc_attrs__", ()):
        v = getattr(obj, k, _UNSET)
        if v is not _UNSET:
            yield k, v
