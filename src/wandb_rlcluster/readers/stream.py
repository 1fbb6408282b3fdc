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
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from .files import LoadedLog, _error, _not_regular, _os_reason
from .json_document import _collect_meta, _dict_format
from .lines import LineRows, _parse_line
from .values import _clean_item, _parse_int

#: Files larger than this (bytes) in a streamable format are streamed (``RLCLUSTER_STREAM_BYTES`` changes it).
STREAM_BYTES = 64 << 20
_PIECE = 1 << 20
_ROWS_KEY = re.compile(r'"log_history"\s*:\s*\[')
_DECODER = json.JSONDecoder()
_BIG_INT_DECODER = json.JSONDecoder(parse_int=_parse_int)


def stream_bytes() -> int:
    raw = os.environ.get("RLCLUSTER_STREAM_BYTES", "").strip()
    return int(raw) if raw.isdigit() and int(raw) > 0 else STREAM_BYTES


class StreamedLog(LoadedLog):
    """A ``LoadedLog`` whose ``rows`` is an iterator read from disk as it is consumed. ``meta`` and
    ``source_format`` are final once the rows are used up (a printed log may show it is one only late, a
    ``trainer_state.json`` names its wrapper after its rows)."""

    def __init__(self, rows: Iterator[dict[str, object]], source_format: str, path: str,
                 meta: dict[str, object], lines: LineRows | None = None, seen: dict[str, str] | None = None) -> None:
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

    def finished_format(self) -> str:
        return self.source_format


def open_stream(path: str) -> StreamedLog | None:
    """The log at ``path`` as a stream when it is large and in a streamable format, else None (read it whole)."""
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    if _not_regular(st.st_mode) or st.st_size <= stream_bytes():
        return None
    try:
        with open(path, "rb") as fh:
            head = fh.read(_PIECE)
    except OSError:
        return None
    if head[:2] in (b"\x1f\x8b", b"\xff\xfe", b"\xfe\xff"):
        return None  # gzip, UTF-16: read whole, as before
    if head[:3] == b"\xef\xbb\xbf":
        head = head[3:]
    text = head.decode("utf-8", errors="ignore")  # only to recognise the format; rows are decoded strictly
    first = text.lstrip()[:1]
    name = os.fspath(path)
    suffix = Path(name).suffix.lower()
    if first == "{":
        line = text.lstrip().split("\n", 1)[0].strip().rstrip(",")
        if line.endswith("}") and _parse_line(line)[0] is not None and not _ROWS_KEY.search(line):
            lines = LineRows(suffix)
            meta: dict[str, object] = {}
            return StreamedLog(_line_rows(name, st.st_size, lines, meta), "jsonl", name, meta, lines)
        m = _ROWS_KEY.search(text)
        if m is not None and _top_level(text[:m.start()]):
            meta = _tail_meta(name, st.st_size)
            seen: dict[str, str] = {}
            return StreamedLog(_history_rows(name, st.st_size, text[:m.start()], meta, seen), "trainer_state", name,
                               meta, seen=seen)
    return None


def _top_level(before: str) -> bool:
    """Whether a key that follows ``before`` sits at the top level of the document (``before`` then closes as one)."""
    try:
        return isinstance(json.loads(before + '"_": 0}'), dict)
    except (ValueError, RecursionError):
        return False


def _bounded_pieces(fh: BinaryIO, size: int) -> Iterator[bytes]:
    left = size
    while left > 0:
        piece = fh.read(min(_PIECE, left))
        if not piece:
            return
        left -= len(piece)
        yield piece


def _open(name: str) -> BinaryIO:
    try:
        return open(name, "rb")  # closed by the generator that asked for it
    except OSError as exc:
        raise _error(name, f"it cannot be opened ({_os_reason(exc)})") from None


def _decode_line(raw: bytes, name: str, first: bool) -> str:
    if first and raw[:3] == b"\xef\xbb\xbf":
        raw = raw[3:]
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise _error(name, "it is not UTF-8 text", "is it a binary file, or a checkpoint instead of a log?") from None


def _line_rows(name: str, size: int, lines: LineRows, meta: dict[str, object]) -> Iterator[dict[str, object]]:
    """JSON Lines (or a printed log that starts as one), line by line, as ``lines.py`` reads a whole text."""
    from .lines import MAX_LINE_CHARS

    with _open(name) as fh:
        carry = b""
        first = True
        dropping = False  # inside a line too long to be a row: its bytes are skipped, the line counted once
        for piece in _bounded_pieces(fh, size):
            start = 0
            while True:
                end = piece.find(b"\n", start)
                if end < 0:
                    if not dropping:
                        carry += piece[start:]
                        if len(carry) > 4 * MAX_LINE_CHARS + 4:
                            lines.too_long_line()
                            carry, dropping = b"", True
                    break
                if dropping:
                    dropping = False
                    start = end + 1
                    continue
                raw = carry + piece[start:end]
                carry = b""
                start = end + 1
                yield from _rows_of(raw, name, first, lines)
                first = False
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
        with open(name, "rb") as fh:
            fh.seek(max(0, size - _PIECE))
            tail = fh.read(_PIECE).decode("utf-8", errors="ignore")
    except OSError:
        return {}
    i = len(tail)
    for _ in range(64):
        i = tail.rfind("]", 0, i)
        if i < 0:
            break
        try:
            obj = json.loads('{"log_history": []' + tail[i + 1:])
        except (ValueError, RecursionError):
            continue
        if isinstance(obj, dict):
            return _collect_meta(obj)
    return {}


#: An element of ``log_history`` longer than this is not a logged row: the stream stops there with an error.
MAX_ELEMENT_CHARS = 16 << 20


def _history_rows(name: str, size: int, head: str, meta: dict[str, object], seen: dict[str, str]
                  ) -> Iterator[dict[str, object]]:
    """The elements of ``log_history``, parsed one at a time from a window that slides over the file; at the end,
    the document's run-level numbers into ``meta`` and its format's name into ``seen``."""
    with _open(name) as fh:
        text = _text_pieces(_bounded_pieces(fh, size), name)
        buf = next(text, "")
        m = _ROWS_KEY.search(buf)
        if m is None:  # open_stream saw it in the same first piece
            raise _error(name, "its 'log_history' could not be found again")
        pos = m.end()
        skipped = rows = 0
        while True:
            while True:  # the next element, a comma, or the closing bracket
                while pos < len(buf) and buf[pos] in " \t\r\n,":
                    pos += 1
                if pos < len(buf):
                    break
                buf, pos = next(text, ""), 0
                if not buf:
                    raise _error(name, "it is not valid JSON (it ends inside 'log_history': cut off while being "
                                       "written?)")
            if buf[pos] == "]":
                pos += 1
                break
            try:
                obj, end = _DECODER.raw_decode(buf, pos)
            except json.JSONDecodeError as exc:
                more = next(text, "") if len(buf) - pos < MAX_ELEMENT_CHARS else ""
                if more:  # most likely the element goes on in the next piece
                    buf, pos = buf[pos:] + more, 0
                    continue
                raise _error(name, f"it is not valid JSON ({exc.msg} in element {rows + skipped + 1} of "
                                   "'log_history')") from None
            except ValueError:  # an integer too long for int(): a float, as the whole-file reader reads it
                obj, end = _BIG_INT_DECODER.raw_decode(buf, pos)
            except RecursionError:
                raise _error(name, "its JSON is nested too deeply to be a training log") from None
            pos = end
            row = _clean_item(obj, str_keys=True)
            if row:
                rows += 1
                yield row
            else:
                skipped += 1
        rest = buf[pos:] + "".join(text)  # the run-level keys after the rows: a few hundred bytes
    if not rows:
        raise _error(name, "its 'log_history' rows hold no usable scalar values")
    try:
        whole = json.loads(head + '"log_history": []' + rest)
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
        raise _error(name, "it is not UTF-8 text", "is it a binary file, or a checkpoint instead of a log?") from None
