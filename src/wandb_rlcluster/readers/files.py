"""Reading an input file, bounded: the one way any log, checkpoint or config file is read, and what every reader
returns (``LoadedLog``) or raises (``LogReadError``: one human-readable line, never a raw ``json``, ``csv`` or
``UnicodeDecodeError``, because the CLI prints the message as-is).

Inputs are hostile until read: files come from crashing processes and from people. Every file goes through
:func:`read_bounded` (regular files only, a size cap, a bounded gzip). Standard library only: the readers import in a
bare environment (CI, a login node) without numpy, torch or wandb.
"""

from __future__ import annotations

import gzip
import io
import os
import stat
import zlib
from dataclasses import dataclass, field

#: Largest input read into memory, in bytes (a 100k-row trainer_state.json is ~100 MB; reading costs
#: ~3-6x the file). The environment variable ``RLCLUSTER_MAX_INPUT_BYTES`` changes it.
MAX_INPUT_BYTES = 512 * 1024**2


#: A gzip file may expand to at most this many times its own size (JSON logs compress 5-20x; a "gzip
#: bomb" 1000x or more) ...
MAX_GZIP_RATIO = 100


#: ... except that up to this many bytes are always allowed (a small, very repetitive log).
GZIP_RATIO_FLOOR = 32 * 1024**2


_EXPECTED = (
    "expected a trainer_state.json, a JSON list of rows, JSON Lines, a W&B CSV export or a Trainer stdout log"
)


class LogReadError(ValueError):
    """A log file could not be turned into rows; ``str()`` is a single line meant for the user."""

    def __init__(self, message: str) -> None:
        # Collapse newlines so a file name or a parser message can never break the one-line promise.
        super().__init__(" ".join(str(message).split()))


class _TooLong(LogReadError):
    """No row found, and a line was too long to try: said only when nothing more precise is known."""


class InputRefused(ValueError):
    """A path that cannot or must not be read as an input file; ``str()`` is a short reason phrase
    (``"it is a named pipe (FIFO), not a regular file"``) that each caller puts after the file name."""


class InputTooLarge(InputRefused):
    """The file is over the size limit it was read with."""


def input_limit() -> int:
    """The input size cap in bytes: ``RLCLUSTER_MAX_INPUT_BYTES`` when set to a positive integer."""
    raw = os.environ.get("RLCLUSTER_MAX_INPUT_BYTES", "").strip()
    return int(raw) if raw.isascii() and raw.isdigit() and int(raw) > 0 else MAX_INPUT_BYTES


_FILE_KINDS = (
    (stat.S_ISFIFO, "a named pipe (FIFO)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def read_bounded(path: str | os.PathLike[str], limit: int | None = None) -> bytes:
    """The bytes of a regular file of at most ``limit`` bytes (default :func:`input_limit`).

    Every input file (logs, W&B run files, alert configs) is read through here, so none of them
    can block (a FIFO waits forever for a writer), stream forever (``/dev/zero``) or fill memory.
    The path is looked at before it is opened (opening some devices has effects of its own), then
    opened without blocking and checked again on the open descriptor, which a swap of the path cannot
    fool. Raises :class:`InputRefused` with a short reason.
    """
    limit = input_limit() if limit is None else limit
    try:  # look before opening: opening a device can itself do something (/dev/watchdog arms a timer)
        kind = _not_regular(os.stat(path).st_mode)
    except (OSError, ValueError):
        kind = None  # open() below says why
    if kind:
        raise InputRefused(kind)
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise InputRefused("no such file") from None
    except IsADirectoryError:
        raise InputRefused("it is a directory") from None
    except PermissionError:
        raise InputRefused("permission denied") from None
    except (OSError, ValueError) as exc:  # ValueError: a NUL byte in the path
        raise InputRefused(f"it cannot be opened ({_os_reason(exc)})") from None
    try:
        st = os.fstat(fd)
        kind = _not_regular(st.st_mode)  # again on the open descriptor: the path may have been swapped
        if kind:
            raise InputRefused(kind)
        if st.st_size > limit:
            raise InputTooLarge(f"it is {_size(st.st_size)}, over the {_size(limit)} input limit "
                               "(set RLCLUSTER_MAX_INPUT_BYTES to raise it)")
        with os.fdopen(fd, "rb") as fh:
            fd = -1
            data = _read_capped(fh, limit, st.st_size)
    except MemoryError:
        raise InputRefused("it does not fit in memory") from None
    except OSError as exc:
        raise InputRefused(f"it cannot be read ({_os_reason(exc)})") from None
    finally:
        if fd >= 0:
            os.close(fd)
    if len(data) > limit:  # still growing while being read
        raise InputTooLarge(f"it is over the {_size(limit)} input limit (set RLCLUSTER_MAX_INPUT_BYTES to raise it)")
    return data


def _not_regular(mode: int) -> str | None:
    """Why a file of this mode is refused, or None for a regular file."""
    if stat.S_ISDIR(mode):
        return "it is a directory"
    for test, kind in _FILE_KINDS:
        if test(mode):
            return f"it is {kind}, not a regular file"
    return None


def _read_capped(fh: io.BufferedIOBase | gzip.GzipFile, limit: int, expected: int = 0) -> bytes:
    """At most ``limit + 1`` bytes (one more than allowed tells "too big"). Never asks for more than it
    expects in one call: ``read(n)`` allocates ``n`` bytes up front, so ``read(limit)`` would reserve the
    whole cap for a 10-byte file. A file that keeps growing (or a /proc file that says 0 bytes) is read on
    in 1 MiB pieces."""
    want = min(max(expected, 0), limit) + 1
    data = fh.read(want)
    if len(data) < want:
        return data
    parts, total = [data], len(data)
    while total <= limit:
        piece = fh.read(min(1 << 20, limit + 1 - total))
        if not piece:
            break
        parts.append(piece)
        total += len(piece)
    return b"".join(parts)


def _os_reason(exc: BaseException) -> str:
    return getattr(exc, "strerror", None) or type(exc).__name__


def _size(n: int) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} bytes"


@dataclass
class LoadedLog:
    """Rows in file order plus what the analyzer may want to know about the source."""

    rows: list[dict[str, object]]
    source_format: str
    path: str
    meta: dict[str, object] = field(default_factory=dict)


def _decode(data: bytes, name: str) -> str:
    """Bytes to text; gzip and UTF-16 (PowerShell redirects) are common enough to accept."""
    if data[:2] == b"\x1f\x8b":
        data = _gunzip(data, name)
    try:
        if data[:2] in (b"\xff\xfe", b"\xfe\xff"):
            return data.decode("utf-16")
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise _not_utf8(name) from None


def _gunzip(data: bytes, name: str) -> bytes:
    """Decompress, capped both by the input limit and by an expansion ratio: a small gzip can expand a
    thousandfold (a 400 KB "gzip bomb" is 400 MB of text, and reading text costs several times its size)."""
    limit = input_limit()
    ratio_cap = max(GZIP_RATIO_FLOOR, MAX_GZIP_RATIO * len(data))
    cap = min(limit, ratio_cap)
    try:
        with gzip.GzipFile(fileobj=io.BytesIO(data)) as fh:
            out = _read_capped(fh, cap, 4 * len(data))
    except (OSError, EOFError, ValueError, zlib.error) as exc:
        raise _error(name, f"it is a damaged gzip file ({_os_reason(exc) if isinstance(exc, OSError) else exc})"
                     ) from None
    if len(out) > cap:
        if cap < limit:
            raise _error(name, f"it decompresses to over {MAX_GZIP_RATIO}x its size ({_size(len(data))} to over "
                               f"{_size(cap)}): a gzip bomb?", "if it is a real log, gunzip it first")
        raise _error(name, f"it decompresses to over the {_size(limit)} input limit",
                     "set RLCLUSTER_MAX_INPUT_BYTES to raise it")
    return out


def _not_utf8(name: str) -> LogReadError:
    return _error(name, "it is not UTF-8 text", "is it a binary file, or a checkpoint instead of a log?")


def _error(name: str, what: str, hint: str | None = None) -> LogReadError:
    message = f"rlcluster: cannot read '{name}': {what}"
    if hint:
        message += f" ({hint})"
    return LogReadError(message)
