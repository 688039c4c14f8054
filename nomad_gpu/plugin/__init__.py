"""`nomad-gpu-device`: a Nomad external device plugin in Python (go-plugin over gRPC), built on `nvml`.

It advertises whole GPUs and MIG devices as the stock NVIDIA plugin does, and GPUs the operator marks
shared as N share instances each; Reserve maps them to real UUIDs (and to an MPS daemon where one runs).
"""
