"""In-process watching of any training loop that logs to W&B: ``watch(run)`` (``watch.py``)."""
