"""The life of a job (DESIGN 11 and 16), in one home.

`machine.py` is the pure transition function `apply(record, event) -> (record, effects)` over one record per
entry and attempt, with the scheduler's own states (a register in flight, draining) in the record
(`record.py`, which also reads a stored entry back as one); `events.py` names every event and effect;
`table.py` writes the transition table docs/CONTRIBUTING.md shows. `runner.py` performs the effects and
`lifecycle.py` turns what happens into events, with its parts here: stops (`stops.py`), time (`timers.py`),
registers (`register.py`), allocations no entry claims (`foreign.py`), an allocation's update read
(`allocfeed.py`, `pins.py`, `preempted.py`, `portsinuse.py`), reconciliation after a reconnect or a restart
(`reconcile.py`), what is tracked per entry and the drains a restart rebuilds (`tracking.py`), and the way its
calls reach Nomad: the actuator (`actuator.py`), fenced by the leader's lease (`fencing.py`), paused while
Nomad does not answer (`outage.py`).

May import `asks` and `accounting`; never relayout, config, admission, the loops, the HTTP
edge or HA, which all drive the life cycle.
"""
