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

# HCL quoted strings cannot hold a raw newline, so a literal never spans lines; the group makes
# `split` return the text between literals and the literals, alternately
_LITERAL = re.compile(r'("(?:[^"\\\n]|\\.)*")')
_PLACEHOLDER = "__devcluster_literal_{}__"
_MAX_SHAPES = 256


class ShapeCache:
    def __init__(self, parse: Callable[[str], Any], max_shapes: int = _MAX_SHAPES) -> None:
        self._parse = parse
        self._shapes: OrderedDict[tuple[str, ...], Any] = OrderedDict()
        self._max = max_shapes
        self._quoted: list[str] = []  # placeholders made so far, quoted and bare, so that a fill formats none
        self._bare: list[str] = []
        self.hits = self.misses = 0

    def loads(self, text: str) -> Any:
        if "<<" in text:
            return self._parse(text)
        parts = _LITERAL.split(text)
        literals = parts[1::2]
        key = tuple(parts[0::2])  # the text between the literals: the shape, without building it
        tree = self._shapes.get(key)
        if tree is not None:
            self.hits += 1
            self._shapes.move_to_end(key)
            return _fill(tree, self._holes(literals))
        self.misses += 1
        direct = self._parse(text)  # raises on bad input, as a plain parse would
        shape = "".join(part if i % 2 == 0 else '"' + _PLACEHOLDER.format(i // 2) + '"'
                        for i, part in enumerate(parts))
        try:
            shaped = self._parse(shape)
        except Exception:
            return direct
        if _fill(shaped, self._holes(literals)) == direct:
            self._shapes[key] = shaped
            if len(self._shapes) > self._max:
                self._shapes.popitem(last=False)
        return direct

    def _holes(self, literals: list[str]) -> dict[str, str]:
        """Placeholder -> literal, in both the quoted and the bare form python-hcl2 may return."""
        while len(self._bare) < len(literals):
            self._bare.append(_PLACEHOLDER.format(len(self._bare)))
            self._quoted.append('"' + self._bare[-1] + '"')
        holes = dict(zip(self._quoted, literals, strict=False))  # the lists may be longer
        holes.update(zip(self._bare, [literal[1:-1] for literal in literals], strict=False))
        return holes


def _fill(node: Any, holes: dict[str, str]) -> Any:
    if isinstance(node, str):
        return holes.get(node, node)
    if isinstance(node, dict):
        return {(holes.get(k, k) if isinstance(k, str) else k): _fill(v, holes) for k, v in node.items()}
    if isinstance(node, list):
        return [_fill(v, holes) for v in node]
    return node
