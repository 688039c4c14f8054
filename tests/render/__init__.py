"""Tests of nomad_gpu.render: spec validation, HCL escaping, rendering, sweeps."""
