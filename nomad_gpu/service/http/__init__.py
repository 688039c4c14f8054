"""The HTTP edge: the API's routes (`api` assembles them), their shared error map (`httpkit`), read views,
OpenAPI, and the listener with its connection limits and browser guard.

Turns requests into calls on the loops and admission and their answers into wire shapes
(`nomad_gpu.api.payloads`). May import every group below it; never `ha` (a standby wraps the edge, not
the other way).
"""
