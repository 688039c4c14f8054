"""The running companion: the scheduler's loops, the life of each job, the HTTP API and HA.

Grouped by capability, each group a subpackage whose `__init__.py` says what it may import; lowest first
(a group imports only the groups before it, `tests/test_layers.py`): `ui` (the dashboard's static files),
`accounting`, `asks`, `life`, `relayout`, `config`, `admission`, `loops`, `http`, `ha`. The modules here
wire the process (`app`) and are the CLI's other ways in (`demo`, `backup`, `loglimit`); no group
imports them.
"""
