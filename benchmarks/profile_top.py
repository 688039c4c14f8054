"""The top entries of a py-spy profile in collapsed-stack form (`scale.py --profile FILE`): each frame's
share of all samples, inclusive (the frame or anything it called) and self (the frame itself).

    python benchmarks/profile_top.py FILE [--top 30] [--match nomad_gpu]

`--match` keeps only frames whose text holds the string in the inclusive list (the project's own, say).
`--areas` also splits the samples by where in the service they fall (the first area whose frame a stack
holds, in the order of `AREAS`).
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

AREAS = (
    ("submit: the durable queue (store add, quota, limits)", "SqliteStore.add"),
    ("submit: decode and validate the spec", "check_request"),
    ("submit: fleet check, classes, after", "check_queued"),
    ("submit: the reply's JSON", "entry_payload"),
    ("submit: the rest of the worker thread", "create_app.<locals>.submit"),
    ("register: render", "Actuator.render"),
    ("register: POST /v1/jobs/parse", "NomadClient.parse"),
    ("register: POST /v1/jobs", "NomadClient.register"),
    ("register: the rest (state moves in the store)", "Registrar._register"),
    ("cycle: admission's store transaction", "SqliteStore.admit_many"),
    ("cycle: the engine and the rest", "SchedulerService._loop"),
    ("event stream (watcher and the moves it causes)", "Watcher.run"),
    ("HTTP server event loop (uvicorn, middleware)", "uvicorn"),
)


def areas(stacks: list[tuple[list[str], int]]) -> Counter[str]:
    found: Counter[str] = Counter()
    for frames, count in stacks:
        text = ";".join(frames)
        found[next((name for name, frame in AREAS if frame in text), "other")] += count
    return found


def read(path: Path) -> list[tuple[list[str], int]]:
    stacks = []
    for line in path.read_text(encoding="utf-8").splitlines():
        frames, _, count = line.rpartition(" ")
        if frames and count.isdigit():
            stacks.append((frames.split(";"), int(count)))
    return stacks


def short(frame: str) -> str:
    """`func (path:line)` without the line: one entry per function."""
    name, _, where = frame.partition(" (")
    return f"{name} ({where.rsplit(':', 1)[0]})" if where else name


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("profile", type=Path)
    parser.add_argument("--top", type=int, default=30)
    parser.add_argument("--match", default="")
    parser.add_argument("--areas", action="store_true")
    args = parser.parse_args()
    stacks = read(args.profile)
    total = sum(count for _, count in stacks) or 1
    inclusive: Counter[str] = Counter()
    own: Counter[str] = Counter()
    for frames, count in stacks:
        names = [short(f) for f in frames]
        for name in set(names):
            inclusive[name] += count
        own[names[-1]] += count
    print(f"{total} samples")
    if args.areas:
        print("by area %:")
        for name, count in areas(stacks).most_common():
            print(f"  {100 * count / total:5.1f}  {name}")
    print("inclusive %:")
    for name, count in [(n, c) for n, c in inclusive.most_common() if args.match in n][:args.top]:
        print(f"  {100 * count / total:5.1f}  {name}")
    print("self %:")
    for name, count in own.most_common(args.top):
        print(f"  {100 * count / total:5.1f}  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
