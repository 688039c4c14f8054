"""`nomad-gpu-device`: the process Nomad starts from its plugin_dir, and go-plugin's handshake with it.

go-plugin's contract for a plugin in any language: check the magic cookie Nomad sets, listen on a fresh
Unix socket, print exactly one line `1|2|unix|<socket>|grpc` to stdout before anything else, and log to
stderr (Nomad reads JSON lines with `@level`/`@message` as log records of that level). Settings are read
here, once: the environment go-plugin sets, and one test-only variable,
`NOMAD_GPU_DEVICE_FAKE_NVML=<layout or JSON file>`, that makes the plugin read a fake NVML node instead
of the real one (never set it on a real node).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType
from typing import Any

MAGIC_COOKIE_KEY = "NOMAD_PLUGIN_MAGIC_COOKIE"
MAGIC_COOKIE_VALUE = "e4327c2e01eabfd75a8a67adb114fb34a757d57eee7728d857a8cec6e91a7255"
"""Nomad's device/driver plugin handshake cookie (plugins/base, unchanged since Nomad 0.9)."""
CORE_PROTOCOL, APP_PROTOCOL = 1, 2
FAKE_NVML_ENV = "NOMAD_GPU_DEVICE_FAKE_NVML"
STOP_GRACE_S = 0.5

NOT_BY_HAND = ("nomad-gpu-device is a Nomad device plugin: Nomad starts it from plugin_dir when the agent "
               "config has a plugin \"nomad-gpu-device\" block. It is not meant to be run by hand.")

_LEVELS = {logging.DEBUG: "debug", logging.INFO: "info", logging.WARNING: "warn", logging.ERROR: "error",
           logging.CRITICAL: "error"}


class HclogJsonHandler(logging.Handler):
    """One JSON object per line on stderr, in the shape Nomad's plugin log reader maps to levels."""

    def __init__(self, stream: Any = None) -> None:
        super().__init__()
        self.stream = stream or sys.stderr

    def emit(self, record: logging.LogRecord) -> None:
        try:
            line: dict[str, Any] = {
                "@level": _LEVELS.get(record.levelno, "info"),
                "@message": record.getMessage(),
                "@module": record.name,
                "@timestamp": datetime.fromtimestamp(record.created, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f+00:00"),
            }
            if record.exc_info:
                line["error"] = self.formatException(record.exc_info)
            self.stream.write(json.dumps(line) + "\n")
            self.stream.flush()
        except (OSError, ValueError):
            # The agent is gone and took the pipe with it (Python ignores SIGPIPE, so writes raise).
            pass

    def formatException(self, exc_info: Any) -> str:
        return logging.Formatter().formatException(exc_info)


def _refuse(message: str) -> int:
    try:
        sys.stderr.write(message + "\n")
        sys.stderr.flush()
    except OSError:
        pass
    return 1


def check_environment(env: Mapping[str, str]) -> str | None:
    """Why this process must not serve (one line), or None."""
    if env.get(MAGIC_COOKIE_KEY) != MAGIC_COOKIE_VALUE:
        return NOT_BY_HAND
    if env.get("PLUGIN_CLIENT_CERT"):
        return "nomad-gpu-device: the host asked for AutoMTLS (PLUGIN_CLIENT_CERT), which this plugin does not support"
    versions = [v.strip() for v in env.get("PLUGIN_PROTOCOL_VERSIONS", str(APP_PROTOCOL)).split(",") if v.strip()]
    if str(APP_PROTOCOL) not in versions:
        return f"nomad-gpu-device: speaks plugin protocol {APP_PROTOCOL}, the host offers {','.join(versions)}"
    return None


def handshake_line(socket_path: str) -> str:
    return f"{CORE_PROTOCOL}|{APP_PROTOCOL}|unix|{socket_path}|grpc\n"


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    refusal = check_environment(os.environ)
    if refusal is not None:
        return _refuse(refusal)
    level = logging.DEBUG if "--debug" in args else logging.INFO
    unknown = [a for a in args if a != "--debug"]
    if unknown:
        return _refuse(f"nomad-gpu-device: unknown argument(s) {' '.join(unknown)} (only --debug)")
    root = logging.getLogger()
    root.handlers[:] = [HclogJsonHandler()]
    root.setLevel(level)
    logging.captureWarnings(True)

    # Imported after the checks: a hand-run refusal stays instant, and nothing can print before them.
    from nomad_gpu.plugin.server import Stopper, build_server
    from nomad_gpu.plugin.state import NodeState

    nvml: Any = None
    fake = os.environ.get(FAKE_NVML_ENV)
    if fake:
        from nomad_gpu.nvml import FakeNvml, load_layout

        try:
            nvml = FakeNvml(load_layout(fake))
        except ValueError as exc:
            return _refuse(f"nomad-gpu-device: {exc}")
        logging.getLogger(__name__).warning("reading a FAKE NVML node (%s): for tests only", fake)

    state = NodeState(nvml)
    stopper = Stopper()
    sock_dir = Path(tempfile.mkdtemp(prefix="nomad-gpu-device-"))
    sock = sock_dir / "plugin.sock"  # a fresh dir keeps the path far below the ~108-byte socket limit
    server = build_server(state, stopper)
    try:
        server.add_insecure_port(f"unix:{sock}")
        server.start()
    except Exception as exc:
        shutil.rmtree(sock_dir, ignore_errors=True)
        return _refuse(f"nomad-gpu-device: cannot listen on {sock}: {exc}")

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stopper.stop()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    sys.stdout.write(handshake_line(str(sock)))
    sys.stdout.flush()
    # After the handshake the host reads and drops stdout; stray prints go to the log instead.
    sys.stdout = sys.stderr
    started = time.monotonic()
    while not stopper.wait(1.0):
        pass
    server.stop(STOP_GRACE_S).wait(STOP_GRACE_S + 0.5)
    state.close()
    shutil.rmtree(sock_dir, ignore_errors=True)
    logging.getLogger(__name__).info("stopped after %.1f s", time.monotonic() - started)
    logging.shutdown()
    # gRPC's own threads must not hold the exit past Nomad's 2 s limit.
    os._exit(0)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
