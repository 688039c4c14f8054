"""What runs on its own: the scheduler's cycle and the events it hands to the life cycle (`scheduler`),
preemption, idle reclaim, the usage poller, sweep throttling, device health, config reload
and the start-up check for jobs of an older database.

May import every group below it (`admission`, `config`, `relayout`, `life`, `asks`, `accounting`, `ui`);
never the HTTP edge or HA, which drive the loops.
"""
