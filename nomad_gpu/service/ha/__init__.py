"""High availability on PostgreSQL: which replica leads (`leadership`, the lease) and a standby's API that
forwards to the leader (`standby`).

The top group: it wraps the HTTP edge and starts or stops the loops as leadership is won or lost, so it
may import every group; none imports it (only `service/app.py`, which wires the process). The lease's
fencing of Nomad writes is `life/fencing.py`, beside the actuator it guards.
"""
