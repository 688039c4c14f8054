"""MIG re-layout: the controller that plans a node's new layout (`controller`), the loop that runs it
(`loop`), the job that applies it on a node (`applyjob`), its Nomad side (`port`) and its settings
(`config`).

May import `life` (the executor, fencing), `asks` and `accounting`; never config, admission, the loops,
the HTTP edge or HA (the scheduler asks it for re-layouts, not the other way).
"""
