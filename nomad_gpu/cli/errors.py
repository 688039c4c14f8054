"""The CLI's one error boundary: every expected failure becomes one line on stderr and an exit code.

Bad input (a spec, a flag, a file, a request the service refused with a 4xx) is exit code 2; an
unreachable service or a service-side failure is 1; never a traceback. Commands in any module of
the CLI wrap their callback with :func:`friendly`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

from nomad_gpu.cli.api_client import ServiceError, ServiceUnreachable
from nomad_gpu.cli.output import fail
from nomad_gpu.domain.errors import NomadGpuError

F = TypeVar("F", bound=Callable[..., Any])


def friendly(fn: F) -> F:
    """Map every expected failure to one line and an exit code."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        from nomad_gpu.render import RenderError, SpecError

        try:
            return fn(*args, **kwargs)
        except ServiceUnreachable as exc:
            fail(str(exc), code=1)
        except ServiceError as exc:
            fail(str(exc), code=2 if 400 <= exc.status < 500 else 1)
        except (SpecError, RenderError, ValueError, NomadGpuError) as exc:
            fail(str(exc) or type(exc).__name__)
        except OSError as exc:
            fail(f"{exc.filename or ''}: {exc.strerror or exc}".strip(": "))

    return wrapper  # type: ignore[return-value]
