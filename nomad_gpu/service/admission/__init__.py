"""Who may submit what: the caller and its rights (`access`), and a submission's checks in their one order
(`submission`: dependencies, the fleet, the node pool).

May import `config`, `asks`, `accounting`; never the loops, the HTTP edge or HA (the scheduler calls into
admission, not the other way).
"""
