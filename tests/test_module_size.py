"""No module in `nomad_gpu/` over 400 lines (`wc -l`), so a module stays one concept a reader can hold.

A ratchet: the files over the limit when this test was written are listed with their line counts as
ceilings. Such a file may shrink but never grow past its ceiling; a file not listed may not pass the
limit; and an entry must be removed once its file is back under the limit (the test says so), so the
table only ever gets shorter. The goal is an empty table. Generated protobuf modules (`*_pb2*.py`)
are not ours to shape and are left out.
"""

from __future__ import annotations

from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "nomad_gpu"
LIMIT = 400

CEILINGS: dict[str, int] = {
    # The goal is an empty table. Path under nomad_gpu/: its line count when it was listed; lower a
    # ceiling when its file shrinks, and remove the entry once the file is within LIMIT.
}


def line_counts(root: Path) -> dict[str, int]:
    """`wc -l` of each of our Python files under `root` (newlines counted, as `wc -l` does)."""
    return {path.relative_to(root).as_posix(): path.read_bytes().count(b"\n")
            for path in sorted(root.rglob("*.py")) if "_pb2" not in path.name}


def oversize(counts: dict[str, int], ceilings: dict[str, int], limit: int = LIMIT) -> list[str]:
    """What breaks the ratchet: a listed file past its ceiling, an unlisted file past the limit, an
    entry whose file is back under the limit (or gone)."""
    problems = []
    for path, lines in sorted(counts.items()):
        ceiling = ceilings.get(path)
        if ceiling is None and lines > limit:
            problems.append(f"{path}: {lines} lines, over {limit}: split it into modules of one concept each")
        elif ceiling is not None and lines > ceiling:
            problems.append(f"{path}: {lines} lines, past its ceiling of {ceiling}: it may shrink, never grow")
    for path in sorted(ceilings):
        if counts.get(path, 0) <= limit:
            problems.append(f"{path}: now {counts.get(path, 0)} lines, within {limit}: remove its entry from "
                            "CEILINGS (the table only gets shorter)")
    return problems


def test_no_module_is_over_the_limit_or_past_its_ceiling() -> None:
    problems = oversize(line_counts(PACKAGE), CEILINGS)
    assert not problems, "\n".join(problems)


def test_the_ratchet_catches_growth_a_new_oversized_file_and_a_stale_entry() -> None:
    ceilings = {"big.py": 450, "shrunk.py": 420}
    assert oversize({"big.py": 450, "shrunk.py": 401, "small.py": 400}, ceilings) == []
    assert oversize({"big.py": 451, "shrunk.py": 401}, ceilings) == [
        "big.py: 451 lines, past its ceiling of 450: it may shrink, never grow"]
    assert oversize({"big.py": 450, "shrunk.py": 401, "new.py": 401}, ceilings) == [
        "new.py: 401 lines, over 400: split it into modules of one concept each"]
    assert oversize({"big.py": 450, "shrunk.py": 400}, ceilings) == [
        "shrunk.py: now 400 lines, within 400: remove its entry from CEILINGS (the table only gets shorter)"]
    assert oversize({"big.py": 450}, ceilings) == [
        "shrunk.py: now 0 lines, within 400: remove its entry from CEILINGS (the table only gets shorter)"]


def test_generated_protobuf_modules_are_left_out(tmp_path: Path) -> None:
    (tmp_path / "plugin_pb2.py").write_text("x = 1\n" * 500)
    (tmp_path / "plugin_pb2_grpc.py").write_text("x = 1\n" * 500)
    (tmp_path / "ours.py").write_text("x = 1\n" * 3)
    assert line_counts(tmp_path) == {"ours.py": 3}
