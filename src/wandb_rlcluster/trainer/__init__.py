"""What only a running transformers / TRL Trainer has, for RLClusterCallback: the live inputs merged into each log row
(``inputs.py``: ``probes.py``, ``gradients.py`` and ``sharded_grads.py``, ``trl_rollouts.py``), the checkpoint state
(``checkpoint.py``), the rank reduction (``distributed.py``), the W&B rows (``sink.py``) and the one place that knows
transformers' and TRL's frame names (``internals.py``)."""
