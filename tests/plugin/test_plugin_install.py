"""The plugin as installed: the console script, started through a link in a plugin_dir under its block's name,
and (on a GPU machine) against real NVML."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from plugin_host import plugin_env, start_plugin, validate_fingerprint

from nomad_gpu.nvml import Inventory, read_inventory

pytestmark = pytest.mark.server  # starts a server or subprocess: not in `make check`

SCRIPT = Path(sys.executable).parent / "nomad-gpu-device"


@pytest.mark.skipif(not SCRIPT.exists(), reason="the package is not installed into this interpreter's environment")
def test_console_script_linked_into_plugin_dir_hands_shakes(tmp_path: Path) -> None:
    plugin_dir = tmp_path / "plugins"
    plugin_dir.mkdir()
    link = plugin_dir / "nomad-gpu-device"  # Nomad 1.10+: the file name must equal the plugin block's label
    link.symlink_to(SCRIPT)
    proc = subprocess.Popen([str(link)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            env=plugin_env("h200"))
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().decode()
        assert line.startswith("1|2|unix|") and line.endswith("|grpc\n")
    finally:
        proc.terminate()
        proc.wait(timeout=5)
    assert proc.returncode == 0  # SIGTERM is a clean stop too


@pytest.mark.gpu
def test_plugin_fingerprints_the_real_gpus() -> None:
    inventory = read_inventory()
    if not isinstance(inventory, Inventory):
        pytest.skip(inventory.message)
    plugin = start_plugin(None)
    try:
        plugin.set_config({})
        resp, stream = plugin.first_fingerprint()
        stream.cancel()
        assert validate_fingerprint(resp) == []
        ids = {d.ID for g in resp.device_group for d in g.devices}
        expected = {m.uuid for g in inventory.gpus for m in g.migs} | {
            g.uuid for g in inventory.gpus if not g.mig_enabled}
        assert ids == expected
        assert plugin.shutdown() < 2.0
    finally:
        plugin.close()
