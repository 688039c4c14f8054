"""A real GPU's MIG profile table against the planner's (read only: nothing here creates, destroys or
changes anything); skipped without a GPU, and where MIG is off (NVML lists profiles only in MIG mode)."""

from __future__ import annotations

import re

import pytest

from nomad_gpu.domain.miglayout import geometry_for
from nomad_gpu.nvml import Inventory, NvmlReader, codes

pytestmark = pytest.mark.gpu


def test_nvml_profiles_and_instance_placements_match_the_table() -> None:
    with NvmlReader() as reader:
        inventory = reader.read(links=False)
        if not isinstance(inventory, Inventory):
            pytest.skip(inventory.message)
        mig_gpus = [g for g in inventory.gpus if g.mig_enabled]
        if not mig_gpus:
            pytest.skip("no GPU in MIG mode here (tests never enable it)")
        for gpu in mig_gpus:
            handle = reader.handle_by_uuid(gpu.uuid)
            seen: list[tuple[str, int | None]] = []
            for enum in range(codes.GPU_INSTANCE_PROFILE_COUNT):
                try:
                    info = reader.nvml.nvmlDeviceGetGpuInstanceProfileInfo(handle, enum)
                except reader.nvml.NVMLError:
                    continue
                name = info.name.decode() if isinstance(info.name, bytes) else str(info.name)
                seen.append((name.removeprefix("MIG ").strip().lower(), None))
            seen += [(m.profile, m.placement_size) for m in gpu.migs if m.placement_size is not None]
            # Newer drivers also list +gfx, -me and +me.all variants; the planner lays out the plain ones.
            plain = [(p, s) for p, s in seen if re.fullmatch(r"\d+g\.\d+gb(\+me)?", p)]
            geometry = geometry_for(gpu.name, plain)
            assert geometry is not None, f"{gpu.name}: no table fits NVML's profiles {sorted(set(seen))}"
            for m in gpu.migs:
                shape = geometry.shape(m.profile)
                assert shape is not None and m.placement_start in shape.starts and m.placement_size == shape.size
