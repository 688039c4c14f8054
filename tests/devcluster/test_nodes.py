"""Node JSON over HTTP: stubs, `?resources=true`, full nodes, MIG groups and the shared group
(reference sections 4 and 5)."""

from __future__ import annotations

import nomad
import pytest
import requests

from nomad_gpu.devcluster import DevCluster

from .conftest import CLUSTERS, ClusterFactory

pytestmark = pytest.mark.server  # starts a server or subprocess: not in `make check`


def test_node_stubs_have_no_resources_unless_asked(shared_mixed: DevCluster) -> None:
    client = nomad.Nomad(address=shared_mixed.url, timeout=5)
    stubs = client.nodes.get_nodes()
    assert [s["Name"] for s in stubs] == ["a100-1", "a100-2", "h100-1", "h100-mig-1", "shared-l40s-1", "cpu-1",
                                         "h200-reserved-1"]
    stub = stubs[0]
    assert "NodeResources" not in stub and "ReservedResources" not in stub
    assert stub["Attributes"] is None
    assert {"Address", "ID", "Datacenter", "NodeClass", "NodePool", "Version", "Drain", "SchedulingEligibility",
            "Status", "StatusDescription", "Drivers", "CreateIndex", "ModifyIndex"} <= set(stub)
    assert (stub["Status"], stub["SchedulingEligibility"], stub["Drain"]) == ("ready", "eligible", False)

    # python-nomad sends `resources=True`: Go's ParseBool accepts it (reference section 9).
    with_resources = client.nodes.get_nodes(resources=True)
    devices = with_resources[0]["NodeResources"]["Devices"]
    assert devices[0]["Name"] == "NVIDIA A100-SXM4-80GB" and len(devices[0]["Instances"]) == 8
    assert with_resources[0]["ReservedResources"]["Cpu"]["CpuShares"] == 0
    assert requests.get(f"{shared_mixed.url}/v1/nodes", params={"os": "true"}).json()[0]["Attributes"] == {
        "os.name": "ubuntu"}


def test_bad_bool_parameter_is_400(shared_mixed: DevCluster) -> None:
    reply = requests.get(f"{shared_mixed.url}/v1/nodes", params={"resources": "yes"})
    assert reply.status_code == 400
    assert reply.headers["content-type"].startswith("text/plain")


def test_full_node_shape(seed: DevCluster) -> None:
    node_id = seed.node_ids()["gpu-a800-1"]
    node = nomad.Nomad(address=seed.url).node.get_node(node_id)
    assert node["ID"] == node_id and node["Name"] == "gpu-a800-1"
    assert (node["Datacenter"], node["NodeClass"], node["NodePool"]) == ("dc1", "gpu", "default")
    assert node["Attributes"]["unique.hostname"] == "gpu-a800-1"
    assert node["Attributes"]["nomad.version"]
    assert node["NodeResources"]["Cpu"]["CpuShares"] == 128000
    assert node["NodeResources"]["Memory"]["MemoryMB"] == 1048576
    assert node["Drain"] is False and node["DrainStrategy"] is None
    assert isinstance(node["StatusUpdatedAt"], int)
    (group,) = node["NodeResources"]["Devices"]
    assert (group["Vendor"], group["Type"], group["Name"]) == ("nvidia", "gpu", "NVIDIA A800-SXM4-80GB")
    # The server-side Attribute struct has no omitempty: unset keys are null.
    assert group["Attributes"]["memory"] == {"Float": None, "Int": 81920, "String": None, "Bool": None,
                                             "Unit": "MiB"}
    assert group["Attributes"]["driver_version"]["String"]
    instance = group["Instances"][0]
    assert instance["ID"].startswith("GPU-") and instance["Healthy"] is True and instance["HealthDescription"] == ""
    assert instance["Locality"]["PciBusID"].startswith("00000000:")
    # Devices are never in Attributes.
    assert not any("gpu" in key for key in node["Attributes"] if key.startswith("device"))


def test_missing_node_is_404_text(seed: DevCluster) -> None:
    reply = requests.get(f"{seed.url}/v1/node/00000000-0000-0000-0000-000000000000")
    assert (reply.status_code, reply.text) == (404, "node not found")
    assert reply.headers["content-type"] == "text/plain; charset=utf-8"


def test_mig_groups_skip_the_parent(make_cluster: ClusterFactory) -> None:
    cluster = make_cluster(CLUSTERS / "mig-h100.yaml")
    (node_id,) = cluster.node_ids().values()
    groups = requests.get(f"{cluster.url}/v1/node/{node_id}").json()["NodeResources"]["Devices"]
    by_name = {g["Name"]: g for g in groups}
    assert set(by_name) == {
        "NVIDIA H100 80GB HBM3",
        "NVIDIA H100 80GB HBM3 MIG 3g.40gb",
        "NVIDIA H100 80GB HBM3 MIG 2g.20gb",
        "NVIDIA H100 80GB HBM3 MIG 1g.10gb",
    }
    assert len(by_name["NVIDIA H100 80GB HBM3"]["Instances"]) == 2  # the two MIG parents are skipped
    assert len(by_name["NVIDIA H100 80GB HBM3 MIG 1g.10gb"]["Instances"]) == 2 + 7
    mig = by_name["NVIDIA H100 80GB HBM3 MIG 3g.40gb"]
    assert mig["Vendor"] == "nvidia" and mig["Type"] == "gpu"
    assert mig["Instances"][0]["ID"].startswith("MIG-")
    assert mig["Attributes"]["memory"]["Int"] == 40448  # 39.50 GiB, as NVML reports a 3g.40gb
    # A MIG slice shares its parent's PCI bus ID.
    bus = mig["Instances"][0]["Locality"]["PciBusID"]
    siblings = [i for g in groups for i in g["Instances"] if i["Locality"]["PciBusID"] == bus]
    assert {i["ID"][:4] for i in siblings} == {"MIG-"} and len(siblings) == 4


@pytest.mark.parametrize("resources", [True, False])
def test_shared_gpus_are_a_separate_group(shared_mixed: DevCluster, resources: bool) -> None:
    node_id = shared_mixed.node_ids()["shared-l40s-1"]
    if resources:
        node = next(n for n in nomad.Nomad(address=shared_mixed.url).nodes.get_nodes(resources=True)
                    if n["ID"] == node_id)
    else:
        node = requests.get(f"{shared_mixed.url}/v1/node/{node_id}").json()
    (group,) = node["NodeResources"]["Devices"]
    assert (group["Vendor"], group["Type"], group["Name"]) == ("nomad-gpu", "shared-gpu", "NVIDIA L40S")
    ids = [i["ID"] for i in group["Instances"]]
    assert [i.rpartition("-share-")[2] for i in ids] == ["0", "1", "2", "3"] * 2 and ids[0].startswith("GPU-")
    assert (group["Attributes"]["slots"]["Int"], group["Attributes"]["milli_per_slot"]["Int"]) == (4, 250)


def test_cpu_only_node_has_no_devices(shared_mixed: DevCluster) -> None:
    node = requests.get(f"{shared_mixed.url}/v1/node/{shared_mixed.node_ids()['cpu-1']}").json()
    assert node["NodeResources"]["Devices"] is None


def test_nodes_report_the_played_nomad_version(make_cluster: ClusterFactory) -> None:
    cluster = make_cluster(CLUSTERS / "seed-a800.yaml", nomad_version="1.10.5")
    (stub,) = requests.get(f"{cluster.url}/v1/nodes", timeout=5).json()
    node = requests.get(f"{cluster.url}/v1/node/{stub['ID']}", timeout=5).json()
    assert (stub["Version"], node["Attributes"]["nomad.version"]) == ("1.10.5", "1.10.5")
    assert cluster.audit()["nomad_version"] == "1.10.5"
