"""How `nomad-gpu status` tells preemption: an entry's preemptions and warnings, the service's preemptions
under way and the graces the nodes cut short."""

from __future__ import annotations

from nomad_gpu.api.payloads import Entry, Status
from nomad_gpu.cli.entryview import status_lines
from nomad_gpu.cli.serviceview import service_rows


def test_an_entry_says_how_often_it_was_preempted_and_what_it_is_warned_of() -> None:
    entry = Entry(id="q000004", name="x", team="t", state="queued", attempts=1, refusals=1, preemptions=1,
                  reason="preempted by q000007 (serving) on n1; waiting", warnings=("checkpoint.grace 120 s ...",))
    lines = dict(status_lines(entry, None, None, {}))
    assert lines["preempted"] == "1 time(s), no retry used"
    assert lines["warning"] == "checkpoint.grace 120 s ..."
    assert lines["reason"].startswith("preempted by q000007 (serving) on n1")


def test_the_service_lists_preemptions_under_way_and_grace_warnings() -> None:
    info = Status(preemptions=[{"preemptor": "q000007", "node": "id-1", "node_name": "n1", "victims": ["q000004"],
                                "stopping": ["q000004"], "why": "class"}],
                  grace_warnings={"q000009": "checkpoint.grace 120 s is longer ..."})
    rows = dict(service_rows(info))
    assert rows["preempting"] == "q000004 on n1 for q000007 (class)"
    assert rows["warning q000009"].startswith("checkpoint.grace 120 s")
