"""Constraint checks as Nomad's scheduler makes them, unknown targets and operators included.

A dev cluster that ignores a constraint it does not understand is kinder than Nomad, and a companion
tested against it places jobs that a real cluster never runs. Nomad resolves both sides of a node
constraint (`resolveTarget`, `scheduler/feasible/feasible.go` v2.0.5): a literal is itself, a known
interpolation is the node's value, anything else is *not found*; then `checkConstraint` decides, so
an unknown target fails `=`, `is_set`, `regexp`, order and set operators (and passes `!=` against a
non-empty value, and `is_not_set`), and an unknown operator filters every node out.

Order operators compare as integers, then floats, then strings (`checkOrder`); `version` and
`semver` follow hashicorp/go-version constraints (`>= 1.2, < 2.0`, `~> 1.2`); `distinct_hosts` and
`distinct_property` pass here, because Nomad checks them in iterators of their own (placement.py
checks `distinct_hosts`).
"""

from __future__ import annotations

import re
from collections.abc import Callable

EQUAL = ("=", "==", "is")
NOT_EQUAL = ("!=", "not")
ORDER = ("<", "<=", ">", ">=")
DISTINCT_HOSTS = "distinct_hosts"
DISTINCT_PROPERTY = "distinct_property"

Resolver = Callable[[str], tuple[str, bool]]


def literal_or(resolve_interpolation: Callable[[str], tuple[str, bool]]) -> Resolver:
    """A resolver: a target without `${` is a literal; others go to `resolve_interpolation`."""
    def resolve(target: str) -> tuple[str, bool]:
        if not target.startswith("${"):
            return target, True
        return resolve_interpolation(target)
    return resolve


def holds(operand: str, left: str, right: str, left_found: bool, right_found: bool) -> bool:
    """`checkConstraint` (`scheduler/feasible/feasible.go`, v2.0.5) over resolved string values."""
    if operand in (DISTINCT_HOSTS, DISTINCT_PROPERTY):
        return True
    if operand in EQUAL:
        return left_found and right_found and left == right
    if operand in NOT_EQUAL:
        return left != right
    if operand in ORDER:
        return left_found and right_found and _order(operand, left, right)
    if operand == "is_set":
        return left_found
    if operand == "is_not_set":
        return not left_found
    if operand in ("version", "semver"):
        return left_found and right_found and version_matches(left, right)
    if operand == "regexp":
        if not (left_found and right_found):
            return False
        try:
            return re.search(right, left) is not None
        except re.error:
            return False
    if operand in ("set_contains", "set_contains_all", "set_contains_any"):
        if not (left_found and right_found):
            return False
        have = {part.strip() for part in left.split(",")}
        want = [part.strip() for part in right.split(",")]
        return any(w in have for w in want) if operand == "set_contains_any" else all(w in have for w in want)
    return False  # an operator Nomad does not know filters the node out


def _order(operand: str, left: str, right: str) -> bool:
    pair: tuple[int, int] | tuple[float, float] | tuple[str, str]
    try:
        pair = (int(left), int(right))
    except ValueError:
        try:
            pair = (float(left), float(right))
        except ValueError:
            pair = (left, right)
    a, b = pair
    return {"<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b}[operand]  # type: ignore[operator]


_VERSION_RE = re.compile(r"^v?(\d+(?:\.\d+)*)(?:-([0-9A-Za-z.-]+))?(?:\+[0-9A-Za-z.-]+)?$")
_CLAUSE_RE = re.compile(r"^\s*(=|!=|>=|<=|>|<|~>)?\s*(\S+)\s*$")


def _parse_version(text: str) -> tuple[tuple[int, ...], str, int] | None:
    match = _VERSION_RE.match(text.strip())
    if match is None:
        return None
    parts = tuple(int(p) for p in match[1].split("."))
    return parts + (0,) * (3 - len(parts)), match[2] or "", len(parts)


def version_matches(version: str, constraint: str) -> bool:
    """hashicorp/go-version `Constraints.Check`: every comma-separated clause must hold; a
    pre-release version satisfies only clauses that name a pre-release themselves."""
    parsed = _parse_version(version)
    if parsed is None:
        return False
    have, pre, _ = parsed
    for clause in constraint.split(","):
        match = _CLAUSE_RE.match(clause)
        wanted = None if match is None else _parse_version(match[2])
        if match is None or wanted is None:
            return False
        op, (want, want_pre, given) = match[1] or "=", wanted
        if pre and not want_pre:
            return False
        key, want_key = (have, pre == ""), (want, want_pre == "")
        if op == "~>":
            upper = list(want[: max(given - 1, 1)])
            upper[-1] += 1
            if not (key >= want_key and have < tuple(upper) + (0,) * (3 - len(upper))):
                return False
        elif not {"=": key == want_key and pre == want_pre, "!=": key != want_key or pre != want_pre,
                  ">": key > want_key, "<": key < want_key, ">=": key >= want_key, "<=": key <= want_key}[op]:
            return False
    return True
