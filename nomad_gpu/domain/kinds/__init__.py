"""GPU kinds: one module per kind behind one protocol (`base`), and the registry that lists them.

- `whole`: whole GPUs (`WholeGpus`), `mig`: MIG instances (`MigSlices`), `share`: time-slice
  shares (`GpuShare`);
- `base`: the protocols `GpuKind` (the kind) and `GpuAsk` (a request for it), and `Option`;
- `registry`: `register`, `kinds`, `kind_named`, `kind_of`.
"""

from __future__ import annotations

from nomad_gpu.domain.kinds.base import GpuAsk, GpuKind, IndexKey, Option
from nomad_gpu.domain.kinds.mig import MIG, MigSlices
from nomad_gpu.domain.kinds.registry import kind_named, kind_of, kinds, register, unregister
from nomad_gpu.domain.kinds.share import SHARE, GpuShare
from nomad_gpu.domain.kinds.whole import WHOLE, WholeGpus

__all__ = ["MIG", "SHARE", "WHOLE", "GpuAsk", "GpuKind", "GpuShare", "IndexKey", "MigSlices", "Option", "WholeGpus",
           "kind_named", "kind_of", "kinds", "register", "unregister"]
