"""What an allocation's task events say about how its tasks ended (read from `TaskStates`).

Nomad's ClientStatus alone cannot tell a task that ended by itself from one its client killed: both
end `complete` (client/allocrunner, v2.0.5). The events can: `Terminated` with an exit code, or a kill.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def killed(task_states: Any) -> bool:
    """Whether a task's last event is `Killing` or `Killed` (`TaskKilling`, `TaskKilled`, nomad/structs/structs.go)."""
    if not isinstance(task_states, Mapping):
        return False
    for state in task_states.values():
        events = state.get("Events") if isinstance(state, Mapping) else None
        if isinstance(events, list) and events and isinstance(events[-1], Mapping) \
                and events[-1].get("Type") in ("Killing", "Killed"):
            return True
    return False


def exited_zero(task_states: Any, stopped: bool = False) -> bool:
    """Whether every task's last event of note is `Terminated` with exit code 0, followed by nothing
    but `Not Restarting` (`TaskRunner.Run` and `shouldRestart`, task_runner.go v2.0.5). A kill
    (`Killing`, `Killed`), a sibling's failure, a driver failure or a restart after it all mean it
    did not simply end by itself. `stopped`: a `Killed` after it is allowed (the task exited 0 on the
    stop's signal, `TaskTerminated` with its `ExitCode` and `Signal` 0, before `TaskKilled`)."""
    if not isinstance(task_states, Mapping) or not task_states:
        return False
    for state in task_states.values():
        events = state.get("Events") if isinstance(state, Mapping) else None
        if not isinstance(events, list):
            return False
        last = next((i for i in range(len(events) - 1, -1, -1)
                     if isinstance(events[i], Mapping) and events[i].get("Type") == "Terminated"), None)
        if last is None or events[last].get("ExitCode") not in (0, None) or events[last].get("Signal"):
            return False
        after = ("Not Restarting", "Killed") if stopped else ("Not Restarting",)
        if any(not isinstance(e, Mapping) or e.get("Type") not in after for e in events[last + 1:]):
            return False
    return True
