"""Live-run pieces: the probes that measure what only a running trainer can, and the W&B sink."""
