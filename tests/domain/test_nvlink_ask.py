"""`gpu: {nvlink: true}`: a multi-GPU ask placed only on an NVLink-connected set; it waits for one rather
than landing on PCIe, and is refused with the reason where no node could ever give one."""

from __future__ import annotations

from nomad_gpu.domain.feasible import never_runs
from nomad_gpu.domain.kinds import WholeGpus
from nomad_gpu.domain.topology import LinkClass

from .builders import A100, admitted, cycle, job, ledger_of, make_node, waiting, whole_gpus
from .test_topology_fit import gpu, hold, no_nvlink, pairs, topo_node


def linked(count: int) -> WholeGpus:
    return WholeGpus(count, nvlink=True)


def test_it_waits_rather_than_take_a_pcie_set() -> None:
    ledger = ledger_of(topo_node("a100-1", pairs("a100-1")))  # type: ignore[arg-type]
    hold(ledger, "busy", "a100-1", [0, 2, 4, 6])  # one GPU of every pair taken: 4 free, none joined
    plain = admitted(cycle(ledger, [job("plain", WholeGpus(2))]), "plain")
    assert plain.placements[0].link is not LinkClass.NVLINK  # what a plain ask gets: PCIe
    w = waiting(cycle(ledger, [job("linked", linked(2))]), "linked")
    assert "NVLink" in w.detail


def test_it_takes_an_nvlink_set_when_one_is_free() -> None:
    ledger = ledger_of(topo_node("a100-1", pairs("a100-1")))  # type: ignore[arg-type]
    hold(ledger, "busy", "a100-1", [0, 2, 4])  # the pair 6-7 is whole
    (p,) = admitted(cycle(ledger, [job("linked", linked(2))]), "linked").placements
    assert p.instance_ids == gpu("a100-1", 6, 7) and p.link is LinkClass.NVLINK


def test_between_nodes_it_skips_the_one_without_nvlink() -> None:
    ledger = ledger_of(topo_node("a-pcie", no_nvlink("a-pcie")), topo_node("b-pairs", pairs("b-pairs")))  # type: ignore[arg-type]
    (p,) = admitted(cycle(ledger, [job("linked", linked(4))]), "linked").placements
    assert str(p.node) == "b-pairs" and p.link is LinkClass.NVLINK


def test_refused_where_no_node_publishes_its_topology() -> None:
    stock = make_node("stock", gpus=whole_gpus("stock", 8))
    why = never_runs(job("linked", linked(2)), [stock])
    assert why is not None and "NVLink" in str(why) and "topology" in str(why)
    assert never_runs(job("plain", WholeGpus(2)), [stock]) is None


def test_refused_where_no_nvlink_set_is_that_large() -> None:
    """Bridged pairs give NVLink sets of whole pairs only: 3 GPUs can never all have a peer in the set."""
    node = make_node("pairs", gpus=whole_gpus("pairs", 8), topology=pairs("pairs"))
    assert never_runs(job("four", linked(4)), [node]) is None
    why = never_runs(job("three", linked(3)), [node])
    assert why is not None and "3 NVLink-connected GPUs" in str(why)
    pcie = make_node("pcie", gpus=whole_gpus("pcie", 8), topology=no_nvlink("pcie"))
    assert never_runs(job("two", linked(2)), [pcie]) is not None


def test_it_says_what_it_asks() -> None:
    assert linked(4).describe() == "4 x GPU on NVLink"
    assert WholeGpus(4, frozenset({A100})).describe() == f"4 x {A100}"
