"""What the service counts and keeps: its Prometheus metrics, the GPU-hours report over a window, idle
reclaim's GPU-hours and its own recent history.

Records and sums, no loop and no Nomad call: every other group reads them, so this one imports nothing of
the service (only the domain, the store and the API's wire shapes).
"""
