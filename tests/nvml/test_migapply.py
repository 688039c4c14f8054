"""`node mig apply` against the fake NVML: idle instances re-laid, running ones never touched."""

from __future__ import annotations

import json
from typing import Any

import pytest
from click.testing import CliRunner

from nomad_gpu.cli.main import main
from nomad_gpu.domain.errors import InvalidRequest
from nomad_gpu.nvml import FakeNvml, NvmlReader, codes
from nomad_gpu.nvml.layouts import h100_mig, h100_mig_pair
from nomad_gpu.nvml.migapply import ApplyReport, Refused, apply_layout

TARGET = "3g.40gb@0,3g.40gb@4"


def pair() -> tuple[FakeNvml, list[str], list[list[str]]]:
    fake = FakeNvml(h100_mig_pair())
    gpus = [g.uuid for g in fake.node.gpus]
    migs = [[m.uuid for m in g.migs] for g in fake.node.gpus]  # 3g@0, 1g@4, 1g@5, 1g@6
    return fake, gpus, migs


def run(fake: FakeNvml, gpu: str, layout: str, idle: list[str], dry_run: bool = False) -> ApplyReport:
    with NvmlReader(fake) as reader:
        return apply_layout(reader, gpu, layout, frozenset(idle), dry_run=dry_run)


def test_idle_1g_become_a_3g_and_the_running_3g_keeps_its_id() -> None:
    fake, gpus, migs = pair()
    got = run(fake, gpus[1], TARGET, migs[1][1:])
    assert got.before == ("3g.40gb@0", "1g.10gb@4", "1g.10gb@5", "1g.10gb@6")
    assert got.after == ("3g.40gb@0", "3g.40gb@4")
    assert sorted(c.id for c in got.destroyed) == sorted(migs[1][1:])
    (made,) = got.created
    assert made.placement == "3g.40gb@4" and made.id.startswith("MIG-") and made.id not in migs[1]
    assert [m.uuid for m in fake.node.gpus[1].migs if m.start == 0] == [migs[1][0]]  # untouched
    assert fake.node.gpus[0] == FakeNvml(h100_mig_pair()).node.gpus[0]  # the other GPU too
    # Each compute instance goes before its GPU instance; creation follows the destroys.
    kinds = [c.split(" ")[0] + " " + c.split(" ")[1] for c in fake.changes]
    assert kinds == ["destroy CI", "destroy GI"] * 3 + ["create GI", "create CI"]


def test_applying_the_layout_a_gpu_has_changes_nothing() -> None:
    fake, gpus, migs = pair()
    run(fake, gpus[1], TARGET, migs[1][1:])
    changes = list(fake.changes)
    again = run(fake, gpus[1], TARGET, [])
    assert again.created == () and again.destroyed == () and again.before == again.after
    assert fake.changes == changes


def test_refuses_an_instance_not_listed_idle_and_changes_nothing() -> None:
    fake, gpus, migs = pair()
    with pytest.raises(Refused, match="not listed in --expect-idle"):
        run(fake, gpus[1], TARGET, migs[1][1:2])
    assert fake.changes == []


def test_refuses_an_instance_with_processes_even_if_listed_idle() -> None:
    fake, gpus, migs = pair()
    with pytest.raises(Refused, match="has processes"):
        run(fake, gpus[0], TARGET, migs[0][1:])  # GPU 0's 1g@4 runs a process
    assert fake.changes == []


class HiddenProcesses(FakeNvml):
    """NVML in a container without the host's PID namespace lists no processes; destroy still says IN_USE."""

    def nvmlDeviceGetComputeRunningProcesses(self, h: Any) -> list[Any]:
        return []


def test_nvml_in_use_stops_the_change_and_reports_what_was_done() -> None:
    fake = HiddenProcesses(h100_mig_pair())
    gpu = fake.node.gpus[0]
    with pytest.raises(Refused, match="in use") as info:
        run(fake, gpu.uuid, TARGET, [m.uuid for m in gpu.migs[1:]])
    assert info.value.report is not None
    assert all(c.placement != "1g.10gb@4" for c in info.value.report.destroyed)
    assert any(m.start == 4 and m.has_compute_instance for m in fake.node.gpus[0].migs)  # the busy 1g stays


def test_dry_run_changes_nothing() -> None:
    fake, gpus, migs = pair()
    got = run(fake, gpus[1], TARGET, migs[1][1:], dry_run=True)
    assert got.dry_run and [c.placement for c in got.created] == ["3g.40gb@4"] and len(got.destroyed) == 3
    assert fake.changes == []


@pytest.mark.parametrize(("layout", "why"), [
    pytest.param("3g.40gb@2", "may start only at slice 0, 4", id="bad-start"),
    pytest.param("3g.40gb@0,2g.20gb@2", "overlap", id="overlap"),
    pytest.param("3g.20gb@4", "no known MIG profile table", id="other-sku"),
])
def test_bad_layouts_are_refused_before_any_change(layout: str, why: str) -> None:
    fake, gpus, _ = pair()
    with pytest.raises(InvalidRequest, match=why):
        run(fake, gpus[1], layout, [])
    assert fake.changes == []


def test_a_gpu_not_in_mig_mode_or_not_here_is_bad_input() -> None:
    fake = FakeNvml(h100_mig())
    with pytest.raises(InvalidRequest, match="not in MIG mode"):
        run(fake, fake.node.gpus[1].uuid, "7g.80gb@0", [])
    with pytest.raises(InvalidRequest, match="no GPU"):
        run(fake, "GPU-nope", "7g.80gb@0", [])


def test_the_fake_refuses_what_nvml_refuses() -> None:
    fake, gpus, _ = pair()
    fake.nvmlInit()
    h = fake.nvmlDeviceGetHandleByUUID(gpus[1])
    place = fake.c_nvmlGpuInstancePlacement_t
    for profile_id, start, size, code in [(9, 4, 4, codes.INSUFFICIENT_RESOURCES),  # over the 1g at 4-6
                                          (9, 2, 4, codes.INVALID_ARGUMENT),       # 3g never starts at 2
                                          (0, 0, 8, codes.INSUFFICIENT_RESOURCES)]:  # 7g over everything
        with pytest.raises(fake.NVMLError) as info:
            fake.nvmlDeviceCreateGpuInstanceWithPlacement(h, profile_id, place(start, size))
        assert info.value.value == code
    gi = fake.nvmlDeviceGetGpuInstanceById(h, 12)  # the 1g at slice 5
    with pytest.raises(fake.NVMLError) as info:
        fake.nvmlGpuInstanceDestroy(gi)  # its compute instance is still there
    assert info.value.value == codes.IN_USE


def cli(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, ["node", "mig", "apply", "--fake-nvml", "h100-mig-pair", *args])
    return result.exit_code, result.stdout, result.stderr


def test_cli_prints_the_report_and_exits_by_outcome() -> None:
    _, gpus, migs = pair()
    code, out, _ = cli("--gpu", gpus[1], "--layout", TARGET, "--expect-idle", ",".join(migs[1][1:]))
    assert code == 0
    report = json.loads(out)
    assert set(report) >= {"gpu", "before", "after", "created", "destroyed"}
    assert report["after"] == ["3g.40gb@0", "3g.40gb@4"]
    code, out, err = cli("--gpu", gpus[0], "--layout", TARGET, "--expect-idle", ",".join(migs[0][1:]))
    assert code == 3 and err.count("\n") == 1 and "has processes" in err
    code, _, err = cli("--gpu", gpus[1], "--layout", "3g.40gb@2")
    assert code == 2 and err.startswith("error: ") and err.count("\n") == 1
