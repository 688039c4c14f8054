"""What a store's location may show of itself: a PostgreSQL URL carries a password, which no message, log
line or `repr` of the settings may repeat."""

from __future__ import annotations

import re

__all__ = ["redacted"]


def redacted(location: str) -> str:
    """The location without a password (`postgresql://user:secret@host/db` -> `postgresql://user:***@host/db`,
    `...?password=secret` -> `...?password=***`)."""
    out = re.sub(r"^([^:/]+://[^:/@]*):[^@/]*@", r"\1:***@", location)
    return re.sub(r"(?i)(password=)[^&\s]*", r"\1***", out)
