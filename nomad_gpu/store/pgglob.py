"""A shell-style glob as a PostgreSQL regular expression: `list(name_glob=...)` filtered by the database
with the same matches as SQLite's GLOB and the CLI's `fnmatch.fnmatchcase`, where PostgreSQL has no GLOB.

`*` any run of characters, `?` one character, `[...]` one of a set (`a-z` ranges), negated by `[!...]` or
`[^...]`; a `]` first in a set is a member; a `[` that no `]` closes is itself. Everything else is literal
(each character escaped: `\\` and a non-alphanumeric character is that character in an ARE).
"""

from __future__ import annotations


def _lit(ch: str) -> str:
    return ch if ch.isalnum() else "\\" + ch


def glob_regex(pattern: str) -> str:
    """The anchored regular expression matching what ``pattern`` matches (case-sensitive)."""
    out, i, n = ["^"], 0, len(pattern)
    while i < n:
        ch = pattern[i]
        i += 1
        if ch == "*":
            out.append(".*")
        elif ch == "?":
            out.append(".")
        elif ch == "[":
            j = i + 1 if i < n and pattern[i] in "!^" else i
            j = j + 1 if j < n and pattern[j] == "]" else j
            end = pattern.find("]", j)
            if end < 0:
                out.append("\\[")
                continue
            body = pattern[i:end]
            i = end + 1
            negate = body[:1] in ("!", "^")
            body = body[1:] if negate else body
            out.append("[^" if negate else "[")
            k = 0
            while k < len(body):
                if k + 2 < len(body) and body[k + 1] == "-":
                    out.append(f"{_lit(body[k])}-{_lit(body[k + 2])}")
                    k += 3
                else:
                    out.append(_lit(body[k]))
                    k += 1
            out.append("]")
        else:
            out.append(_lit(ch))
    out.append("$")
    return "".join(out)
