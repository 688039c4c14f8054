"""ACL policies and tokens from a cluster file's `acl:` section or `dev-cluster --acl-file`: the policy of
docs/nomad-acl.md rehearsed as written, and policies Nomad would refuse refused with its words."""

from __future__ import annotations

import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import nomad
import pytest
import requests

from nomad_gpu.devcluster.aclpolicy import AclPolicyError, AclSpec, load_acl_file, parse_policy, tokens_of
from nomad_gpu.devcluster.config import ClusterFileError, load_cluster_file
from nomad_gpu.devcluster.version import NomadVersion

from .conftest import TWO_NODES, ClusterFactory
from .helpers import jobspec

REPO = Path(__file__).resolve().parents[2]
V2, V1_11_1 = NomadVersion.parse("2.0.5"), NomadVersion.parse("1.11.1")
SERVICE_SECRET, OPERATOR_SECRET = "0b6d3c1e-service-token", "7f3a9e20-operator-token"


def documented_policy() -> str:
    """The policy docs/nomad-acl.md tells an operator to apply for the service (Nomad 1.11.2 and later)."""
    text = (REPO / "docs" / "nomad-acl.md").read_text(encoding="utf-8")
    match = re.search(r"```hcl\n# nomad-gpu-service\.policy\.hcl\n(.*?)```", text, re.S)
    assert match is not None, "docs/nomad-acl.md has no nomad-gpu-service.policy.hcl block"
    return match.group(1)


def acl_section(policy: str) -> dict[str, object]:
    return {"policies": {"nomad-gpu-service": policy},
            "tokens": [{"name": "nomad-gpu service", "secret": SERVICE_SECRET, "policies": ["nomad-gpu-service"]},
                       {"name": "operator", "secret": OPERATOR_SECRET, "type": "management"}]}


def test_the_documented_policy_parses_into_what_it_says() -> None:
    (service, operator) = tokens_of(AclSpec.model_validate(acl_section(documented_policy())), V2)
    assert service.node_read() and not service.management and operator.management
    for cap in ("parse-job", "read-job", "register-job", "deregister-job", "alloc-lifecycle", "read-logs"):
        assert service.allows("default", cap), cap
    assert not service.allows("default", "submit-job") and not service.allows("other", "read-job")


@pytest.mark.parametrize(("policy", "version", "words"), [
    pytest.param('namespace "default" {\n  capabilities = ["read-jobs"]\n}\n', V2,
                 "Invalid namespace capability 'read-jobs'", id="typo"),
    pytest.param('namespace "default" {\n  capabilities = ["register-job"]\n}\n', V1_11_1,
                 "Invalid namespace capability 'register-job'", id="fine-grained-before-1.11.2"),
    pytest.param('namespace "default" {\n  policy = "admin"\n}\n', V2, "Invalid namespace policy 'admin'",
                 id="policy-word"),
    pytest.param('node {\n  policy = "list"\n}\n', V2, "Invalid node policy 'list'", id="node-word"),
    pytest.param('namespace "default" {\n  policy = "read"\n}\nnodes {\n  policy = "read"\n}\n', V2,
                 "Unsupported", id="unknown-block"),
    pytest.param('namespace "default" {\n  policy = "read"\n  capabilites = ["read-job"]\n}\n', V2,
                 "Unsupported", id="unknown-key"),
    pytest.param('namespace "default" {\n  variables {\n    path "/ops" {\n      capabilities = ["read"]\n'
                 '    }\n  }\n}\n', V2, "cannot start with a leading '/'", id="variable-path"),
    pytest.param('namespace "default" {\n', V2, "Failed to parse ACL Policy", id="syntax"),
])
def test_a_policy_nomad_refuses_is_refused(policy: str, version: NomadVersion, words: str) -> None:
    with pytest.raises(AclPolicyError, match=re.escape(words)):
        parse_policy(policy, version)


def test_tokens_are_checked_as_nomad_checks_them() -> None:
    base = acl_section('node {\n  policy = "read"\n}\n')
    unknown = {**base, "tokens": [{"secret": SERVICE_SECRET, "policies": ["nope"]}]}
    with pytest.raises(AclPolicyError, match="policy 'nope' does not exist"):
        tokens_of(AclSpec.model_validate(unknown), V2)
    bare = {**base, "tokens": [{"secret": SERVICE_SECRET}]}
    with pytest.raises(AclPolicyError, match="Client tokens must be associated with at least one policy"):
        tokens_of(AclSpec.model_validate(bare), V2)
    merged = {"policies": {"a": 'namespace "ml" {\n  policy = "read"\n}\nnode {\n  policy = "write"\n}\n',
                           "b": 'namespace "ml" {\n  capabilities = ["submit-job"]\n}\nnode {\n  policy = "deny"\n}\n'},
              "tokens": [{"secret": SERVICE_SECRET, "policies": ["a", "b"]}]}
    (token,) = tokens_of(AclSpec.model_validate(merged), V2)
    assert token.allows("ml", "read-job") and token.allows("ml", "submit-job") and not token.node_read()


def test_a_cluster_file_reads_a_policy_file_beside_it(tmp_path: Path) -> None:
    (tmp_path / "svc.policy.hcl").write_text(documented_policy())
    (tmp_path / "cluster.yaml").write_text(
        "name: acl-rehearsal\nnodes:\n  - name: n1\n    gpus: [{model: NVIDIA A100-SXM4-80GB, memory_mib: 81920}]\n"
        f"acl:\n  policies: {{nomad-gpu-service: svc.policy.hcl}}\n  tokens:\n"
        f"    - {{secret: {SERVICE_SECRET}, policies: [nomad-gpu-service]}}\n")
    spec = load_cluster_file(tmp_path / "cluster.yaml")
    assert spec.acl is not None and "register-job" in spec.acl.policies["nomad-gpu-service"]
    (tmp_path / "cluster.yaml").write_text((tmp_path / "cluster.yaml").read_text().replace("svc.policy", "gone"))
    with pytest.raises(ClusterFileError, match="cannot read"):
        load_cluster_file(tmp_path / "cluster.yaml")


@pytest.mark.server
def test_the_documented_policy_rehearsed_on_the_dev_cluster(make_cluster: ClusterFactory) -> None:
    """What the service does with its token (docs/nomad-acl.md's table) passes; what it must not, does not."""
    cluster = make_cluster({**TWO_NODES, "acl": acl_section(documented_policy())})
    svc = {"X-Nomad-Token": SERVICE_SECRET}
    assert requests.get(f"{cluster.url}/v1/nodes", headers=svc, timeout=5).status_code == 200
    parsed = requests.post(f"{cluster.url}/v1/jobs/parse", json={"JobHCL": jobspec("rehearse", duration=3600),
                                                                 "Canonicalize": True}, headers=svc, timeout=5)
    assert parsed.status_code == 200, parsed.text
    registered = requests.post(f"{cluster.url}/v1/jobs", json={"Job": parsed.json()}, headers=svc, timeout=5)
    assert registered.status_code == 200, "register-job registers (Nomad 1.11.2 and later)"
    assert requests.get(f"{cluster.url}/v1/job/rehearse", headers=svc, timeout=5).status_code == 200
    stopped = requests.delete(f"{cluster.url}/v1/job/rehearse", headers=svc, timeout=5)
    assert stopped.status_code == 200, "deregister-job stops a job"
    purge = requests.delete(f"{cluster.url}/v1/job/rehearse", params={"purge": "true"}, headers=svc, timeout=5)
    assert (purge.status_code, purge.text) == (403, "Permission denied"), "purging needs purge-job"
    other = requests.get(f"{cluster.url}/v1/jobs", params={"namespace": "ml"}, headers=svc, timeout=5)
    assert other.status_code == 403
    admin = nomad.Nomad(address=cluster.url, timeout=5, token=OPERATOR_SECRET)
    assert len(admin.nodes.get_nodes()) == len(TWO_NODES["nodes"])
    assert requests.get(f"{cluster.url}/v1/nodes", headers={"X-Nomad-Token": "guess"}, timeout=5).text == \
        "ACL token not found"


@pytest.mark.e2e
def test_dev_cluster_takes_an_acl_file(tmp_path: Path) -> None:
    (tmp_path / "svc.policy.hcl").write_text(documented_policy())
    (tmp_path / "acl.yaml").write_text(
        f"policies: {{nomad-gpu-service: svc.policy.hcl}}\ntokens:\n"
        f"  - {{name: nomad-gpu service, secret: {SERVICE_SECRET}, policies: [nomad-gpu-service]}}\n")
    assert len(load_acl_file(tmp_path / "acl.yaml", V2)) == 1
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "nomad_gpu.cli.main", "dev-cluster", "--cluster", "seed-a800",
                             "--port", str(port), "--acl-file", str(tmp_path / "acl.yaml")],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        url, deadline, got = f"http://127.0.0.1:{port}", time.monotonic() + 30, None
        while got is None and time.monotonic() < deadline:
            try:
                got = requests.get(f"{url}/v1/nodes", timeout=5)
            except requests.ConnectionError:
                time.sleep(0.2)
        assert got is not None and (got.status_code, got.text) == (403, "Permission denied")
        assert requests.get(f"{url}/v1/nodes", headers={"X-Nomad-Token": SERVICE_SECRET}, timeout=5).status_code == 200
    finally:
        proc.terminate()
        proc.wait(timeout=15)
    bad = subprocess.run([sys.executable, "-m", "nomad_gpu.cli.main", "dev-cluster", "--cluster", "seed-a800",
                          "--acl-file", str(tmp_path / "missing.yaml")], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and bad.stderr.startswith("error: ") and len(bad.stderr.splitlines()) == 1
