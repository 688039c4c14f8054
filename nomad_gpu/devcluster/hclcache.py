"""A shape cache in front of python-hcl2, so the dev cluster parses like Nomad: in well under a ms.

Nomad's Go parser reads a jobspec in far less than a millisecond; python-hcl2 takes about 5 ms, and
that cost would sit on the service's admission path (`/v1/jobs/parse`) in every handoff measured
against the dev cluster. Jobs rendered from one template differ only in the contents of their
quoted strings (job ID, node ID, device IDs, meta values), and python-hcl2 returns a quoted string in
its source form, untouched. So the text is split into a *shape* (every single-line quoted string
replaced by a numbered placeholder) and the literals; the shape is parsed once, and later jobs of the
same shape get that tree with their own literals put back.

A shape is cached only after checking, on first sight, that the substituted tree equals a direct
parse of the original text; texts with heredocs skip the cache. Anything odd is a plain parse.
"""

from __future__ import annotations

import re
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

# HCL quoted strings cannot hold a raw newline, so a literal never spans lines
_LITERAL = re.compile(r'"(?:[^"\\\n]|\\.)*"')
_PLACEHOLDER = "__devcluster_literal_{}__"
_MAX_SHAPES = 256


class ShapeCache:
    def __init__(self, parse: Callable[[str], Any], max_shapes: int = _MAX_SHAPES) -> None:
        self._parse = parse
        self._shapes: OrderedDict[str, Any] = OrderedDict()
        self._max = max_shapes
        self.hits = self.misses = 0

    def loads(self, text: str) -> Any:
        if "<<" in text:
            return self._parse(text)
        literals: list[str] = []

        def hole(match: re.Match[str]) -> str:
            literals.append(match.group(0))
            return '"' + _PLACEHOLDER.format(len(literals) - 1) + '"'

        shape = _LITERAL.sub(hole, text)
        tree = self._shapes.get(shape)
        if tree is not None:
            self.hits += 1
            self._shapes.move_to_end(shape)
            return _fill(tree, _holes(literals))
        self.misses += 1
        direct = self._parse(text)  # raises on bad input, as a plain parse would
        try:
            shaped = self._parse(shape)
        except Exception:
            return direct
        if _fill(shaped, _holes(literals)) == direct:
            self._shapes[shape] = shaped
            if len(self._shapes) > self._max:
                self._shapes.popitem(last=False)
        return direct


def _holes(literals: list[str]) -> dict[str, str]:
    """Placeholder -> literal, in both the quoted and the bare form python-hcl2 may return."""
    out: dict[str, str] = {}
    for i, lit in enumerate(literals):
        name = _PLACEHOLDER.format(i)
        out['"' + name + '"'] = lit
        out[name] = lit[1:-1]
    return out


def _fill(node: Any, holes: dict[str, str]) -> Any:
    if isinstance(node, str):
        return holes.get(node, node)
    if isinstance(node, dict):
        return {(holes.get(k, k) if isinstance(k, str) else k): _fill(v, holes) for k, v in node.items()}
    if isinstance(node, list):
        return [_fill(v, holes) for v in node]
    return node
