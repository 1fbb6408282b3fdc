"""The guard: the liveness alerts that fire when ``on_log`` cannot. ``stall.py`` (a step that does not finish),
``crash.py`` (crash hooks), ``guardian.py`` (a separate process for hard deaths such as kill -9), ``wiring.py`` (the
callback's LivenessMonitor and its Trainer events). Their settings are the ``watchdog:`` section of the alert file
(``alerts/watchdog.py``)."""
