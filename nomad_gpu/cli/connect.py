"""Where the CLI finds the service: the one place that reads NOMAD_GPU_ADDR, NOMAD_GPU_TOKEN and
NOMAD_GPU_CACERT (the CA file for a service behind TLS signed by a private CA).

Every command module asks `client()` for its API client (tests replace it with a fake), so none of
them needs the CLI's entry module, which imports them all to register their commands.
"""

from __future__ import annotations

import os

from nomad_gpu.cli.api_client import ApiClient, ServiceError
from nomad_gpu.defaults import DEFAULT_ADDR


def with_scheme(address: str) -> str:
    """`host:port` -> `http://host:port`: an address without a scheme is plain http, as users expect from
    NOMAD_ADDR."""
    address = address.strip()
    return address if "://" in address else f"http://{address}"


def client() -> ApiClient:
    """The API client for the service the environment names (default: the local one)."""
    return ApiClient(with_scheme(os.environ.get("NOMAD_GPU_ADDR") or DEFAULT_ADDR), os.environ.get("NOMAD_GPU_TOKEN"),
                     cacert=os.environ.get("NOMAD_GPU_CACERT") or None)


def node_names(api: ApiClient) -> dict[str, str]:
    """Node ID -> name from the API's inventory view; IDs stand in where it cannot be read."""
    try:
        return {n.id: n.name or n.id for n in api.inventory()}
    except ServiceError:  # e.g. a token that may list its entries but not the inventory
        return {}
