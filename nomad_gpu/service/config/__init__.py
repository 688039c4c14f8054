"""The service's settings: built once at the entry point from flags, environment and a file
(`settings`), one module per section (classes, teams, limits, HA, idle, preemption, usage, run times).

A setting is read here and nowhere else. May import `accounting`, `asks`, `life` (the stop-on-cut-off
default) and `relayout` (the `mig_relayout:` section builds its loop); never admission, the loops, the
HTTP edge or HA.
"""
