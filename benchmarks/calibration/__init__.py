"""The calibration harness (issue 47): every rule on healthy streams under a grid of noise models, against its
declared false-alarm budget, and its delay on graded changes beside the clairvoyant CUSUM. See ``harness.py``."""
