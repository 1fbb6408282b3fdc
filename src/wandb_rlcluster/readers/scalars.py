"""Rows from trackers that keep scalars one by one, as (step, tag, value): TensorBoard, MLflow, trackio.

The analyzer reads rows, one per logging call of the trainer. A tracker that stores each scalar on its own forgets
which call it came from, so the rows are rebuilt: the scalars of one step are one row, except that a step's eval
scalars (``eval/...``, ``eval_...``) and the trainer's end-of-training numbers (``train_runtime``, ``train_loss``,
``total_flos`` ...) start rows of their own, as the trainer logged them, where the tracker does not keep which call
a scalar came from (TensorBoard); a tag seen twice at one step starts a new row too (two calls at the same step).
Rows carry the step as ``step``, read like any log's.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

#: The trainer's end-of-training numbers (transformers' ``Trainer.train`` logs them once, at the last step).
END_OF_TRAINING = frozenset({"train_runtime", "train_loss", "total_flos", "train_samples_per_second",
                             "train_steps_per_second"})

Row = dict[str, object]


def tag_class(tag: str) -> int:
    """0 a training scalar, 1 an eval scalar, 2 an end-of-training number: the rows a step's scalars go to."""
    name = tag[6:] if tag.startswith("train/") else tag
    if name in END_OF_TRAINING:
        return 2
    if name.startswith(("eval/", "eval_")):
        return 1
    return 0


class RowBuilder:
    """Scalars in the order they were written, to rows: ``add`` returns the row a scalar completed (or None),
    ``flush`` the row still open.

    ``call`` (when the tracker keeps it: MLflow's timestamp of one ``log_metrics`` batch) marks the scalars of one
    logging call; without it the eval and end-of-training scalars start their rows (a training scalar such as
    ``epoch`` logged with them stays in their row)."""

    __slots__ = ("_row", "_step", "_cls", "_call")

    def __init__(self) -> None:
        self._row: Row = {}
        self._step: int | None = None
        self._cls = 0
        self._call: object = None

    def add(self, step: int, tag: str, value: float, call: object = None) -> Row | None:
        if tag == "step":  # a scalar named "step" (a custom loop's own counter): the row's step is the tracker's
            return None
        cls = tag_class(tag)
        done = None
        if self._row:
            new = call != self._call if call is not None else bool(cls) and cls != self._cls
            if new or step != self._step or tag in self._row:
                done = self.flush()
        if not self._row:
            self._row = {"step": step}
            self._step, self._cls, self._call = step, cls, call
        self._row[tag] = value
        return done

    def flush(self) -> Row | None:
        row, self._row = self._row, {}
        return row or None


def rows_of(scalars: Iterable[tuple[int, str, float]]) -> Iterator[Row]:
    """The rows of scalars given in the order they were written."""
    builder = RowBuilder()
    for step, tag, value in scalars:
        row = builder.add(step, tag, value)
        if row is not None:
            yield row
    last = builder.flush()
    if last is not None:
        yield last


def rows_of_histories(points: Iterable[tuple[int, float, str, float]]) -> list[Row]:
    """The rows of (step, time, tag, value) points read key by key (MLflow's metric histories): one row per
    logging call (the points of one step logged at one time), in step then time order."""
    builder = RowBuilder()
    rows = []
    for step, when, tag, value in sorted(points, key=lambda p: (p[0], p[1])):
        row = builder.add(step, tag, value, call=when)
        if row is not None:
            rows.append(row)
    last = builder.flush()
    if last is not None:
        rows.append(last)
    return rows
