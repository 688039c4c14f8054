"""The CLI's one exit-code map: the user's mistakes are 2, what failed elsewhere is 1, a bug keeps its traceback."""

from __future__ import annotations

import click
import pytest
from click.testing import CliRunner

from nomad_gpu.cli.api_client import ServiceError, ServiceUnreachable
from nomad_gpu.cli.errors import BAD_INPUT, FAILED, exit_code, friendly
from nomad_gpu.domain.errors import (
    InvalidRequest,
    StateConflict,
    Unavailable,
    UnknownEntry,
    UnreadableReply,
    UpstreamFailed,
)
from nomad_gpu.nomad.client import NomadRejected, NomadUnavailable
from nomad_gpu.render import RenderError, SpecError
from nomad_gpu.sim.trace import TraceError


@pytest.mark.parametrize(("exc", "code"), [
    pytest.param(SpecError("train.yaml:6: groups[0].gpu.count: must be >= 1"), BAD_INPUT, id="spec"),
    pytest.param(RenderError("unknown template"), BAD_INPUT, id="render"),
    pytest.param(InvalidRequest("bad"), BAD_INPUT, id="invalid"),
    pytest.param(TraceError("no such trace"), BAD_INPUT, id="trace"),
    pytest.param(UnknownEntry("no queue entry 'q9'"), BAD_INPUT, id="unknown"),
    pytest.param(StateConflict("running"), BAD_INPUT, id="state"),
    pytest.param(ValueError("bad seed range"), BAD_INPUT, id="value-error"),
    pytest.param(FileNotFoundError(2, "No such file or directory", "x.yaml"), BAD_INPUT, id="file"),
    pytest.param(ServiceError("no queue entry 'q9'", 404), BAD_INPUT, id="service-4xx"),
    pytest.param(ServiceError("internal error", 500), FAILED, id="service-5xx"),
    pytest.param(ServiceError("Nomad could not be read", 502), FAILED, id="service-502"),
    pytest.param(ServiceUnreachable("cannot reach nomad-gpu"), FAILED, id="unreachable"),
    pytest.param(NomadUnavailable("cannot reach Nomad"), FAILED, id="nomad-down"),
    pytest.param(NomadRejected("Nomad refused"), BAD_INPUT, id="nomad-refused"),
    pytest.param(Unavailable("later"), FAILED, id="unavailable"),
    pytest.param(UpstreamFailed("Nomad"), FAILED, id="upstream"),
    pytest.param(UnreadableReply("Entry.id: expected str"), FAILED, id="unreadable-reply"),
])
def test_each_failure_has_one_exit_code(exc: BaseException, code: int) -> None:
    assert exit_code(exc) == code


def test_a_bug_is_not_mapped() -> None:
    assert exit_code(KeyError("x")) is None and exit_code(RuntimeError("x")) is None


@pytest.mark.parametrize(("exc", "code", "line"), [
    pytest.param(SpecError("train.yaml:6: bad"), 2, "error: train.yaml:6: bad", id="spec"),
    pytest.param(FileNotFoundError(2, "No such file or directory", "x.yaml"), 2,
                 "error: x.yaml: No such file or directory", id="file"),
    pytest.param(ServiceUnreachable("cannot reach nomad-gpu"), 1, "error: cannot reach nomad-gpu", id="unreachable"),
])
def test_friendly_prints_one_line_and_exits_with_the_code(exc: BaseException, code: int, line: str) -> None:
    @click.command()
    @friendly
    def command() -> None:
        raise exc

    result = CliRunner().invoke(command, [])
    assert result.exit_code == code and result.stderr.strip() == line and "Traceback" not in result.output


def test_simulate_uses_the_same_map() -> None:
    from nomad_gpu.cli import simulate

    assert not hasattr(simulate, "_friendly")
    result = CliRunner().invoke(simulate.simulate, ["packing", "--seeds", "9-1"])
    assert result.exit_code == 2 and result.stderr.startswith("error: ")
