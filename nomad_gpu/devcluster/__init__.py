"""An embedded, Nomad-API-compatible dev cluster (DESIGN.md 3.8).

Nomad cannot be installed on our machines, so tests, demos and benchmarks run the service against
this loopback stand-in: nodes and GPUs from a cluster file, the Nomad HTTP API subset the service
uses with the shapes and quirks of reference/nomad-api.md, tasks that "run" for a duration given in
job meta, its own device accounting that refuses to double-book, and `GET /_dev/audit`.

It imports nothing from the rest of `nomad_gpu`: it judges the scheduling core, so it must not share
code with it.
"""

from .config import ClusterFileError, ClusterSpec, load_cluster_file, parse_cluster
from .jobs import DEFAULT_DURATION_S, META_DURATION, META_EXIT, META_SHARE_MILLI
from .server import DevCluster, serve_forever

__all__ = [
    "DEFAULT_DURATION_S",
    "META_DURATION",
    "META_EXIT",
    "META_SHARE_MILLI",
    "ClusterFileError",
    "ClusterSpec",
    "DevCluster",
    "load_cluster_file",
    "parse_cluster",
    "serve_forever",
]
