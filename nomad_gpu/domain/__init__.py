"""The pure scheduling core.

Nothing in this package touches the network, the disk, a clock or the environment: every function
takes `now` and data and returns decisions with reasons. The service, the simulator and the
benchmarks all drive this same code, so a simulated result is a claim about the real service.
"""
