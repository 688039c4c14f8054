"""The life of a job (DESIGN 11 and 16), in one home.

`machine.py` is the pure transition function `apply(record, event) -> (record, effects)` over one record
per entry and attempt, with the scheduler's own states (a register in flight, draining) in the record;
`events.py` names every event and effect; `table.py` writes the transition table docs/CONTRIBUTING.md
shows. The runner that performs the effects is `service/life/lifecycle.py`, with its parts here: stops
(`stops.py`), time (`timers.py`), and allocations no entry claims (`foreign.py`), each built with its
dependencies named.
"""
