"""The running companion: wiring, loops (watch, cycle, reconcile), HTTP API and metrics."""
