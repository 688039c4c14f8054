"""nomad-gpu: an ordered, fair, fragmentation-aware GPU queue for HashiCorp Nomad."""

__version__ = "0.1.0"
