"""The CLI's one error boundary: every expected failure becomes one line on stderr and an exit code.

Bad input (a spec, a flag, a file, a request the service refused with a 4xx) is exit code 2; an
unreachable service or Nomad, or a failure on their side, is 1; never a traceback. The codes are one
table, :data:`EXIT_CODES`, read in order (the first class that matches decides), and every command of
the CLI wraps its callback with :func:`friendly`. What matches no row is a bug and keeps its traceback.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

from nomad_gpu.cli.api_client import ServiceError, ServiceUnreachable
from nomad_gpu.cli.output import fail
from nomad_gpu.domain.errors import NomadGpuError, Unavailable, UnreadableReply, UpstreamFailed

F = TypeVar("F", bound=Callable[..., Any])

BAD_INPUT = 2
"""The user can fix it: a spec, a flag, a file, a request refused as such."""
FAILED = 1
"""Nothing the user typed is wrong: something could not be reached or failed on its side."""

EXIT_CODES: tuple[tuple[type[BaseException], int], ...] = (
    (ServiceUnreachable, FAILED),
    (Unavailable, FAILED),
    (UpstreamFailed, FAILED),
    (UnreadableReply, FAILED),
    (NomadGpuError, BAD_INPUT),  # the rest of the tree: InvalidRequest (SpecError, RenderError), UnknownEntry...
    (ValueError, BAD_INPUT),
    (OSError, BAD_INPUT),  # a file that is not there or cannot be read
)


def exit_code(exc: BaseException) -> int | None:
    """The exit code for an expected failure; None for anything else (a bug, which keeps its traceback).

    A service's refusal says by its status whose fault it is: a 4xx is the request's, a 5xx the service's;
    an error marked ``retryable`` (Nomad unreachable, `nomad_gpu.nomad.client`) is never the user's.
    """
    if isinstance(exc, ServiceError):
        return BAD_INPUT if 400 <= exc.status < 500 else FAILED
    if isinstance(exc, NomadGpuError) and getattr(exc, "retryable", False):
        return FAILED
    return next((code for kind, code in EXIT_CODES if isinstance(exc, kind)), None)


def message(exc: BaseException) -> str:
    """The one line a user reads."""
    if isinstance(exc, OSError) and not isinstance(exc, NomadGpuError):
        return f"{exc.filename or ''}: {exc.strerror or exc}".strip(": ")
    return str(exc) or type(exc).__name__


def friendly(fn: F) -> F:
    """Map every expected failure to one line and its exit code."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except Exception as exc:
            code = exit_code(exc)
            if code is None:
                raise
            fail(message(exc), code=code)

    return wrapper  # type: ignore[return-value]
