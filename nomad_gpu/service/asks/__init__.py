"""What a spec asks of the fleet: its workload class (`classes`), its GPU asks per kind (`kindasks`) and
the engine's request it becomes (`translate`).

Pure readings of a spec, used by the life cycle, admission and the cycle alike; imports nothing of the
service but `accounting`.
"""
