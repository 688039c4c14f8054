"""Read python-hcl2's output the way Nomad reads the HCL: blocks by label, strings decoded.

python-hcl2 (8.x) returns every block as a list of ``{label: body}`` dicts with the
label still quoted, and every string in its SOURCE form: quotes kept, escapes and
``$${`` left as written. So a test that compares values must decode them, by the
HCL2 spec (``decode_hcl_string``), rather than compare raw text.
"""

from __future__ import annotations

from typing import Any

from nomad_gpu.render import decode_hcl_string, parse_hcl


def text(value: Any) -> str:
    """A string attribute's value, as Nomad would see it."""
    assert isinstance(value, str), f"expected a string, got {value!r}"
    return decode_hcl_string(value)


def target(value: Any) -> str:
    """A Nomad target such as ``"${node.unique.id}"``: kept verbatim, like Nomad's parser."""
    assert isinstance(value, str), f"expected a string, got {value!r}"
    return decode_hcl_string(value, keep_interpolations=True)


MARKERS = frozenset({"__is_block__", "__comments__", "__inline_comments__"})
"""Keys python-hcl2 adds to its output; anything else (even `__`) is the user's own key."""


def labelled(body: dict[str, Any], kind: str) -> dict[str, dict[str, Any]]:
    """The ``kind "label" { ... }`` blocks of ``body``, by decoded label."""
    out: dict[str, dict[str, Any]] = {}
    for entry in body.get(kind, []):
        for label, inner in entry.items():
            if label in MARKERS:
                continue
            name = text(label)
            assert name not in out, f"two {kind} blocks labelled {name!r}"
            out[name] = inner
    return out


def only(body: dict[str, Any], kind: str) -> dict[str, Any]:
    """The one unlabelled ``kind { ... }`` block of ``body``."""
    blocks = body.get(kind, [])
    assert len(blocks) == 1, f"expected one {kind} block, got {len(blocks)}"
    block: dict[str, Any] = blocks[0]
    return block


def attrs(block: dict[str, Any]) -> dict[str, str]:
    """The string attributes of a block like ``meta`` or ``env``, decoded."""
    return {key: text(value) for key, value in block.items() if key not in MARKERS}


def parse_job(source: str) -> tuple[str, dict[str, Any]]:
    """Parse rendered HCL; return the job id and the job body."""
    parsed = parse_hcl(source)
    jobs = labelled(parsed, "job")
    assert len(jobs) == 1, f"expected one job block, got {list(jobs)}"
    ((job_id, body),) = jobs.items()
    return job_id, body
