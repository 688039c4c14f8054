"""Config reload on SIGHUP: teams (fair-share weights and GPU quotas) and API tokens, all or nothing.

An operator adds a team, changes a quota or revokes a token without a restart (a restart re-reads Nomad
and drops every open connection). `serve` and `dev` read the `--config` file again on SIGHUP, as
`nomad agent` does for its own reloadable settings. Only `teams:`, `default_team:` and `api: tokens:` take
effect; every other setting is read at start-up only. The file is read and checked whole first: a file that
does not load (a typo, a short token, an unknown key) keeps the old config and logs one line, and so does
one that would leave no token where the service started with one (a reload never opens the API). What a
running cycle or request holds is the old value or the new one, never a mix: each is swapped as one
attribute.
"""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Callable
from dataclasses import replace

from nomad_gpu.domain.errors import InvalidRequest
from nomad_gpu.service.admission.access import LiveTokens
from nomad_gpu.service.config.settings import load_config
from nomad_gpu.service.loops.scheduler import SchedulerService

logger = logging.getLogger(__name__)


def reload_config(path: str | None, scheduler: SchedulerService, tokens: LiveTokens, admin_token: str | None) -> bool:
    """Read ``path`` again and swap in its teams and tokens; False (one warning, nothing changed) when it
    does not load or would turn token checking off."""
    if not path:
        logger.warning("config reload: no --config file was given; nothing to reload")
        return False
    try:
        scheduling, access = load_config(path)
    except InvalidRequest as exc:
        logger.warning("config reload refused, the previous config stays: %s", exc)
        return False
    old = tokens.access
    new = replace(old, tokens=access.tokens, grants=access.grants, users=access.users).with_admin(admin_token)
    if old.required and not new.required:
        logger.warning("config reload refused, the previous config stays: %s: api: tokens: it lists no token, "
                       "and the service started with some (a reload never opens the API)", path)
        return False
    scheduler.settings = replace(scheduler.settings, fair=scheduling.fair)
    tokens.swap(new)
    logger.info("config reloaded from %s: %d teams, %d tokens (other settings take effect at a restart)", path,
                len(scheduling.fair.teams), len(new.tokens))
    scheduler.wake()
    return True


def wait_for_signals(reload: Callable[[], object], until: threading.Event | None = None) -> None:
    """Block until SIGINT or SIGTERM (or ``until`` is set); on SIGHUP, ``reload()`` (in this thread, not in the
    signal handler)."""
    stop, hup = threading.Event(), threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    signal.signal(signal.SIGHUP, lambda *_: hup.set())
    while not stop.wait(0.5) and not (until is not None and until.is_set()):
        if hup.is_set():
            hup.clear()
            reload()
