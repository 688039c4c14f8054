"""Patterns a user's text must match: the length capped before any pattern runs, and patterns that
cannot backtrack.

Python's `re` backtracks, and holds the GIL while it does: a pattern with two quantifiers that can take
the same characters (`\\s*` on either side of an optional unit) tries every split of a long run, a cost
that grows with the square of the text or worse, and no other request of the service is answered
meanwhile (one 96 KB `gpu_memory` froze it for 43.6 s). So every pattern applied to spec text is applied
here, only to text within a small cap (a clear refusal naming the cap otherwise), and each pattern is
written so that a character can be taken by one quantifier only.
"""

from __future__ import annotations

import re

__all__ = ["TextRule", "capped", "shown", "too_long"]

SHOWN = 40
"""Characters of a refused text that a message quotes at most."""


def too_long(cap: int, length: int) -> str:
    """The refusal of a text over its cap: the cap and the length, never the text."""
    return f"must be at most {cap} characters, got {length}"


def capped(value: str, cap: int) -> str:
    """``value`` if it is at most ``cap`` characters long; ValueError otherwise (before any pattern)."""
    if len(value) > cap:
        raise ValueError(too_long(cap, len(value)))
    return value


def shown(value: object, limit: int = SHOWN) -> str:
    """``value`` quoted for a message: as written when short, else its start and its length."""
    if isinstance(value, str) and len(value) > limit:
        return f"{value[:limit]!r}... ({len(value)} characters)"
    text = repr(value)
    return text if len(text) <= limit + 2 else f"{text[:limit]}... ({len(text)} characters)"


class TextRule:
    """One pattern for one kind of text (`what` says it in words), read only within `cap` characters.

    The cap is the longest text the pattern can match, so it refuses nothing the pattern would take."""

    def __init__(self, pattern: str, what: str, cap: int) -> None:
        self.pattern = re.compile(pattern)
        self.what = what
        self.cap = cap

    def check(self, value: str) -> str:
        """``value`` if it matches; ValueError with one short line otherwise (the value shown only when short)."""
        capped(value, self.cap)
        if self.pattern.fullmatch(value) is None:
            raise ValueError(f"must be {self.what}, got {value!r}")
        return value

    def __repr__(self) -> str:
        return f"TextRule({self.pattern.pattern!r}, cap={self.cap})"
