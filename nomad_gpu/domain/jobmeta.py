"""The job meta keys the service writes and reads back, and the class a sweep's trial has by default.

They are read by the spec models (render), by GPU accounting's record (store) and by the views, so they
live below all three: one spelling of each key.
"""

from __future__ import annotations

from typing import Literal

META_SWEEP = "nomad_gpu_sweep"
"""Job meta of a sweep trial: the sweep's name."""
META_TRIAL = "nomad_gpu_trial"
"""Job meta of a sweep trial: the trial's index (0-based)."""
META_USER = "nomad_gpu_user"
"""Job meta: the person whose token submitted it (`api.tokens` `user:`); set by the service, never by a spec."""
SWEEP_CLASS: Literal["hpo"] = "hpo"
"""The workload class of a sweep's trials that name none."""
