"""Large logs read as a stream: JSON Lines, and a ``trainer_state.json``'s ``log_history``, a row at a time from disk.

Reading a log whole costs several times its size in memory (the bytes, the text, a dict per row), and a 1M-row
history is about a gigabyte of JSON. Above ``stream_bytes()`` (64 MB), a plain UTF-8 file in one of these two formats
is read in pieces instead: each row goes to the analyzer as it is parsed and none is kept, so memory does not grow
with the file, and the input limit for whole reads does not apply. The rows and the counts are those the whole-file
readers give for the same file (the same line reader, the same row cleaning). Anything else (other formats, gzip,
UTF-16, a document with its rows under another key) is read whole as before, under the input limit. The file is read
up to the size it had when it was opened: a log still being written ends there, and a file that never stops growing
cannot keep the analyzer reading.
"""

from __future__ import annotations

import codecs
import json
import os
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO

from .files import LoadedLog, LogReadError, _error, _not_regular, _not_utf8, _os_reason
from .json_document import _collect_meta, _dict_format
from .lines import LineRows, _parse_line
from .values import _clean_item, _fix_json_tokens, _loads, _parse_int, _quote_value_tokens

#: Files larger than this (bytes) in a streamable format are streamed (``RLCLUSTER_STREAM_BYTES`` changes it).
STREAM_BYTES = 64 << 20
_PIECE = 1 << 20
_HEAD = 1 << 20  # what open_stream reads to recognise the format (the rows' key must be in it)
_ROWS_KEY = re.compile(r'"log_history"\s*:\s*\[')
_FIRST_ROW = re.compile(r"\s*\{")
_NON_SPACE = re.compile(r"\S")
_CLOSES_ROWS = re.compile(r"\s*[,}]")
_DECODER = json.JSONDecoder()
_BIG_INT_DECODER = json.JSONDecoder(parse_int=_parse_int)


def stream_bytes() -> int:
    raw = os.environ.get("RLCLUSTER_STREAM_BYTES", "").strip()
    return int(raw) if raw.isascii() and raw.isdigit() and int(raw) > 0 else STREAM_BYTES


class ReadMeter:
    """Bytes of the file read so far, for a progress bar: ``hook(done, total)`` is called after each piece once
    something sets it (``analyze_path(progress=...)``)."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.done = 0
        self.hook: Callable[[int, int], None] | None = None

    def add(self, n: int) -> None:
        self.done += n
        if self.hook is not None:
            self.hook(self.done, self.total)


class StreamedLog(LoadedLog):
    """A ``LoadedLog`` whose ``rows`` is an iterator read from disk as it is consumed. ``meta`` and
    ``source_format`` (a property that follows the stream) are final once the rows are used up: a printed log may
    show it is one only late, and a ``trainer_state.json`` names its wrapper after its rows."""

    def __init__(self, rows: Iterator[dict[str, object]], source_format: str, path: str,
                 meta: dict[str, object], lines: LineRows | None = None, seen: dict[str, str] | None = None,
                 meter: ReadMeter | None = None) -> None:
        self.meter = meter if meter is not None else ReadMeter(0)
        self._lines = lines
        self._seen = seen if seen is not None else {}
        super().__init__(rows, source_format, path, meta)  # type: ignore[arg-type]  # an iterator, read once

    @property
    def source_format(self) -> str:
        if self._lines is not None:
            return self._lines.source_format
        return self._seen.get("format", self._guess)

    @source_format.setter
    def source_format(self, value: str) -> None:
        self._guess = value


def open_stream(path: str) -> StreamedLog | None:
    """The log at ``path`` as a stream when it is large and in a streamable format, else None (read it whole)."""
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    if _not_regular(st.st_mode) or st.st_size <= stream_bytes():
        return None
    name = os.fspath(path)
    suffix = Path(name).suffix.lower()
    if suffix in (".csv", ".tsv"):
        return None  # the whole reader refuses JSON under a CSV name, and says so
    try:
        with _open(name) as fh:
            head = fh.read(_HEAD)
    except (OSError, LogReadError):
        return None
    if head[:1] != b"{":
        return None  # gzip, UTF-16, a byte-order mark, a printed log, a verl log, a list: read whole, as before
    text = head.decode("utf-8", errors="ignore")  # only to recognise the format; rows are decoded strictly
    nl = text.find("\n")
    line = (text if nl < 0 else text[:nl]).strip().rstrip(",")
    if line.endswith("}") and _parse_line(line)[0] is not None:
        if nl < 0 or _NON_SPACE.search(text, nl) is None:
            return None  # one line: one document (a wrapper, a single row), as the whole reader reads it
        lines = LineRows(suffix)
        meta: dict[str, object] = {}
        meter = ReadMeter(st.st_size)
        return StreamedLog(_line_rows(name, st.st_size, lines, meta, meter), "jsonl", name, meta, lines, meter=meter)
    m = _rows_key(text)
    head_keys = _head_object(text[:m.start()]) if m is not None else None
    if m is None or head_keys is None or _FIRST_ROW.match(text, m.end()) is None:
        return None  # no top-level log_history of rows in the first piece (an empty one, or not rows: read whole)
    meta = _collect_meta(head_keys)  # a document whose keys are not sorted may put max_steps before the rows
    meta.update(_tail_meta(name, st.st_size))
    seen: dict[str, str] = {}
    meter = ReadMeter(st.st_size)
    return StreamedLog(_history_rows(name, st.st_size, text[:m.start()], m.end(), meta, seen, meter),
                       "trainer_state", name, meta, seen=seen, meter=meter)


def _rows_key(text: str) -> re.Match[str] | None:
    """The first ``"log_history": [`` that is a key of its own, not the end of a longer key with an escaped quote."""
    for m in _ROWS_KEY.finditer(text):
        slashes = len(text[:m.start()]) - len(text[:m.start()].rstrip("\\"))
        if slashes % 2 == 0:
            return m
    return None


def _head_object(before: str) -> dict[str, object] | None:
    """The document's keys before the rows' key, when that key sits at its top level (``before`` then closes as an
    object); None otherwise (the key is nested, or the head is not JSON)."""
    try:
        obj = _loads(before + '"_": 0}')
    except (ValueError, RecursionError):
        return None
    return obj if isinstance(obj, dict) else None


def _bounded_pieces(fh: BinaryIO, size: int, meter: ReadMeter | None = None) -> Iterator[bytes]:
    left = size
    while left > 0:
        piece = fh.read(min(_PIECE, left))
        if not piece:
            return
        left -= len(piece)
        if meter is not None:
            meter.add(len(piece))
        yield piece


def _open(name: str) -> BinaryIO:
    """The file, opened as ``files.read_bounded`` opens one: without blocking (a path swapped for a FIFO cannot hang
    the reader) and refused unless the open descriptor is a regular file."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(name, flags)
    except (OSError, ValueError) as exc:
        raise _error(name, f"it cannot be opened ({_os_reason(exc) if isinstance(exc, OSError) else exc})") from None
    try:
        kind = _not_regular(os.fstat(fd).st_mode)
    except OSError:
        kind = "unreadable"
    if kind:
        os.close(fd)
        raise _error(name, kind)
    return os.fdopen(fd, "rb")  # closed by the generator that asked for it


def _decode_line(raw: bytes, name: str, first: bool) -> str:
    if first and raw[:3] == b"\xef\xbb\xbf":
        raw = raw[3:]
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise _not_utf8(name) from None


_BREAK = re.compile(rb"\r\n|[\r\n]")


def _line_rows(name: str, size: int, lines: LineRows, meta: dict[str, object], meter: ReadMeter
               ) -> Iterator[dict[str, object]]:
    """JSON Lines (or a printed log that starts as one), line by line, as ``lines.py`` reads a whole text: lines end
    at ``\\n``, ``\\r\\n`` or ``\\r`` (a progress bar's updates), and each is split again as ``str.splitlines``
    splits it. A line over four times the longest row is skipped without being held (counted as too long)."""
    from .lines import MAX_LINE_CHARS

    cap = 4 * MAX_LINE_CHARS + 4  # bytes: a line of MAX_LINE_CHARS characters is at most this long in UTF-8
    with _open(name) as fh:
        carry = b""
        first = True
        dropping = False  # inside a line too long to be a row: its bytes are skipped, the line counted once
        lf_pending = False  # the last piece ended with a \r: a \n that starts the next one is the same break
        for piece in _bounded_pieces(fh, size, meter):
            start = 0
            if lf_pending and piece[:1] == b"\n":
                start = 1
            lf_pending = False
            for m in _BREAK.finditer(piece, start):
                if dropping:
                    dropping = False
                else:
                    raw = carry + piece[start:m.start()]
                    yield from _rows_of(raw, name, first, lines)
                    first = False
                carry = b""
                start = m.end()
            if piece.endswith(b"\r"):
                lf_pending = True
            if not dropping:
                carry += piece[start:]
                if len(carry) > cap:
                    lines.too_long_line()
                    carry, dropping = b"", True
        if carry and not dropping:
            yield from _rows_of(carry, name, first, lines)
    if not lines.rows:
        lines.no_rows(name)
        raise _error(name, "no line in it is a log row")
    meta.update(lines.meta())


def _rows_of(raw: bytes, name: str, first: bool, lines: LineRows) -> Iterator[dict[str, object]]:
    for text in _decode_line(raw, name, first).splitlines() or [""]:
        row = lines.row(text)
        if row is not None:
            yield row


def _tail_meta(name: str, size: int) -> dict[str, object]:
    """The run-level numbers after ``log_history`` (``max_steps``, ``logging_steps`` ...), read from the file's end
    before the rows are, since the analyzer needs the planned length up front. A guess the rows then confirm:
    ``_history_rows`` parses the real tail when it gets there."""
    try:
        with _open(name) as fh:
            fh.seek(max(0, size - _PIECE))
            tail = fh.read(_PIECE).decode("utf-8", errors="ignore")
    except (OSError, LogReadError):
        return {}
    i = len(tail)
    for _ in range(4096):
        i = tail.rfind("]", 0, i)
        if i < 0:
            break
        if _CLOSES_ROWS.match(tail, i + 1) is None:
            continue  # the rows' list is followed by the next key or the document's end: nothing else can parse
        try:
            obj = _loads('{"log_history": []' + tail[i + 1:])
        except (ValueError, RecursionError):
            continue
        if isinstance(obj, dict):
            return _collect_meta(obj)
    return {}


#: An element of ``log_history`` (or the document's part after it) longer than this is not a logged row: the stream
#: stops there with an error that says so.
MAX_ELEMENT_CHARS = 16 << 20
_WS = " \t\r\n"
_STRUCTURE = re.compile(r'["\[\]{}]')
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)
_TOKEN_END = re.compile(r"[,\]\s]")


class _Window:
    """A window of text that slides over the file: ``buf[pos:]`` is what is not read yet."""

    def __init__(self, pieces: Iterator[str]) -> None:
        self.pieces = pieces
        self.buf = next(pieces, "")
        self.pos = 0
        self.eof = not self.buf

    def more(self) -> bool:
        """Append the next piece (dropping what is read); False at the end of the file."""
        piece = next(self.pieces, "")
        if not piece:
            self.eof = True
            return False
        self.buf, self.pos = self.buf[self.pos:] + piece, 0
        return True

    def skip_space(self) -> bool:
        """Move past whitespace; False when the file ends first."""
        while True:
            while self.pos < len(self.buf) and self.buf[self.pos] in _WS:
                self.pos += 1
            if self.pos < len(self.buf):
                return True
            if not self.more():
                return False


def _element_end(text: str, start: int) -> int | None:
    """Where the JSON value starting at ``text[start]`` ends, by its brackets and strings only (a bare token: at the
    next comma, bracket or space); None when ``text`` ends first. Used only for an element that failed to parse, to
    mend it as the whole reader does."""
    if text[start] not in "[{":
        m = _TOKEN_END.search(text, start)
        return m.start() if m is not None else None
    depth = 0
    i = start
    while True:
        m = _STRUCTURE.search(text, i)
        if m is None:
            return None
        c = m.group()
        if c == '"':
            sm = _STRING.match(text, m.start())
            if sm is None:
                return None
            i = sm.end()
            continue
        depth += 1 if c in "[{" else -1
        i = m.end()
        if depth == 0:
            return i


def _decode(w: _Window, name: str, index: int) -> object:
    """The element at ``w.pos``, parsed as the whole reader parses a document: plain JSON (NaN and Infinity included,
    an integer too long for ``int()`` read as a float), else with its bare tokens (``nan``, ``None``, ``True``)
    rewritten. Reads on while the element may go on in the next piece."""
    while True:
        buf, pos = w.buf, w.pos
        try:
            try:
                obj, end = _DECODER.raw_decode(buf, pos)
            except json.JSONDecodeError:
                raise
            except ValueError:  # an integer too long for int(): a float, as the whole-file reader reads it
                obj, end = _BIG_INT_DECODER.raw_decode(buf, pos)
        except json.JSONDecodeError as exc:
            end_at = _element_end(buf, pos)
            if end_at is None and not w.eof and len(buf) - pos < MAX_ELEMENT_CHARS:
                w.more()  # cut by the piece's end
                continue
            if end_at is not None:
                mended = _mend(buf[pos:end_at])
                if mended is not None:
                    w.pos = end_at
                    return mended
            if len(buf) - pos >= MAX_ELEMENT_CHARS:
                raise _error(name, f"element {index} of its 'log_history' is over {MAX_ELEMENT_CHARS:,} characters: "
                                   "not a logged row") from None
            if w.eof and end_at is None:
                raise _error(name, "it is not valid JSON (it ends inside 'log_history': cut off while being "
                                   "written?)") from None
            raise _error(name, f"it is not valid JSON ({exc.msg} in element {index} of 'log_history')") from None
        except RecursionError:
            raise _error(name, "its JSON is nested too deeply to be a training log") from None
        cut = end == len(buf) or (buf[pos] not in "[{" and _TOKEN_END.search(buf, end) is None)
        if cut and not w.eof and w.more():
            continue  # a number that may go on in the next piece ("12." | "5e3"): read it whole
        w.pos = end
        return obj


def _mend(text: str) -> object | None:
    """An element with bare tokens, parsed after the rewrites the whole reader tries on a document (None if none
    works)."""
    for rewrite in (_quote_value_tokens, _fix_json_tokens):
        fixed, n = rewrite(text)
        if not n:
            continue
        try:
            return _loads(fixed)
        except (ValueError, RecursionError):
            continue
    return None


def _history_rows(name: str, size: int, head: str, start: int, meta: dict[str, object], seen: dict[str, str],
                  meter: ReadMeter) -> Iterator[dict[str, object]]:
    """The elements of ``log_history``, parsed one at a time from a window that slides over the file; at the end,
    the document's run-level numbers into ``meta`` and its format's name into ``seen``."""
    cut_off = _error(name, "it is not valid JSON (it ends inside 'log_history': cut off while being written?)")
    with _open(name) as fh:
        w = _Window(_text_pieces(_bounded_pieces(fh, size, meter), name))
        while len(w.buf) < start and w.more():  # to where open_stream found the rows' key
            pass
        if len(w.buf) < start:
            raise cut_off
        w.pos = start
        skipped = rows = 0
        first = True
        while True:
            if not w.skip_space():
                raise cut_off
            c = w.buf[w.pos]
            if c == "]":  # the end of the rows (open_stream saw a first element: the list is not empty)
                w.pos += 1
                break
            if not first:
                if c != ",":
                    raise _error(name, f"it is not valid JSON (expected ',' or ']' after element {rows + skipped} of "
                                       "'log_history')")
                w.pos += 1
                if not w.skip_space():
                    raise cut_off
                if w.buf[w.pos] in ",]":
                    raise _error(name, f"it is not valid JSON (no element after a ',' in 'log_history', after element "
                                       f"{rows + skipped})")
            first = False
            obj = _decode(w, name, rows + skipped + 1)
            row = _clean_item(obj, str_keys=True)
            if row:
                rows += 1
                yield row
            else:
                skipped += 1
        rest = [w.buf[w.pos:]]
        held = len(rest[0])
        for piece in w.pieces:  # the run-level keys after the rows: a few hundred bytes in a trainer_state.json
            held += len(piece)
            if held > MAX_ELEMENT_CHARS:
                raise _error(name, f"its part after 'log_history' is over {MAX_ELEMENT_CHARS:,} characters: not a "
                                   "training log's run-level numbers")
            rest.append(piece)
    if not rows:
        raise _error(name, "its 'log_history' rows hold no usable scalar values")
    try:
        whole = _loads(head + '"log_history": []' + "".join(rest))
    except (ValueError, RecursionError):
        raise _error(name, "it is not valid JSON after its 'log_history' (cut off while being written?)") from None
    if isinstance(whole, dict):
        meta.update(_collect_meta(whole))
        seen["format"] = _dict_format(whole, "log_history")
    meta["skipped_rows"] = skipped
    meta["rows_key"] = "log_history"


def _text_pieces(pieces: Iterator[bytes], name: str) -> Iterator[str]:
    """UTF-8 text from byte pieces (a character split between two pieces kept whole, a BOM at the start dropped)."""
    decoder = codecs.getincrementaldecoder("utf-8-sig")()
    try:
        for piece in pieces:
            out = decoder.decode(piece)
            if out:  # an empty string would read as the end of the file
                yield out
        out = decoder.decode(b"", final=True)
        if out:
            yield out
    except UnicodeDecodeError:
        raise _not_utf8(name) from None
