"""One reader per log format, and the bounded file reading they all share.

``load_rows`` / ``parse_rows_text`` detect the format from the content (``dispatch.py``) and hand it to its reader:
``json_document.py`` (a transformers ``trainer_state.json``, a JSON list of rows, a wrapper dict), ``lines.py`` (JSON
Lines, the HF Trainer's stdout), ``csv_export.py`` (a W&B CSV export); ``verl.py`` reads verl's console log and
``wandb.py`` a W&B run's ``.wandb`` transaction log (offline runs, and the sidecar's tail of a live one). Every file is
read through ``files.read_bounded``, except a large JSON Lines file or ``trainer_state.json``, which ``stream.py`` reads
a row at a time (``rlcluster analyze`` on a 1M-row history in bounded memory). Standard library only, except
``wandb.py``'s use of wandb's protobuf classes.

Runs kept by a tracker rather than in a file (``sources.py`` picks the reader): ``tensorboard.py`` (event files,
through TensorBoard's own loader), ``mlflow_run.py`` (MLflow's client), ``trackio_run.py`` (trackio's store) and
``wandb_api.py`` (a run on the W&B server, through ``wandb.Api()``), each importing its tracker's package only when
used (an optional extra); ``scalars.py`` rebuilds rows from trackers that keep scalars one by one, ``run_config.py``
reads the trainer family and planned steps from a run's config.
"""

from .dispatch import load_rows, parse_rows_text
from .files import (
    GZIP_RATIO_FLOOR,
    MAX_GZIP_RATIO,
    MAX_INPUT_BYTES,
    InputRefused,
    InputTooLarge,
    LoadedLog,
    LogReadError,
    input_limit,
    read_bounded,
)

__all__ = ["GZIP_RATIO_FLOOR", "MAX_GZIP_RATIO", "MAX_INPUT_BYTES", "InputRefused", "InputTooLarge", "LoadedLog",
           "LogReadError", "input_limit", "load_rows", "parse_rows_text", "read_bounded"]
