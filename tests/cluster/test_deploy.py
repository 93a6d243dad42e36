"""deploy/ as written: deploy/kvnode.service's command, with each machine's environment file made from
deploy/kvnode.env (only its host and the cluster's addresses changed), run on three hosts made of network
namespaces (tests/namespaces.py); the cluster they form serves a write on one host and the read on another,
and deploy/README.md's check (`admin status`) from a fourth host says every member is normal. The guide's
step for client tokens and TLS, run as written, makes a tokens file the node takes and a certificate for
each machine that the others verify by its address, and no other."""

from __future__ import annotations

import configparser
import json
import re
import shlex
import ssl
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kvnode.access.client_auth import read_tokens_file
from kvnode.access.tls import client_context, server_context
from kvnode.config import NodeConfig
from kvnode.ops.flags import unknown_variables
from kvnode.ops.netns import inside
from tests.deploy_guide import guide_block, handshake, run_block
from tests.harness import REPO, wait_for
from tests.namespaces import (
    DEADLINE,
    NODE_HOSTS,
    PORT,
    SUBNET,
    MultiHostCluster,
    NamespacedNode,
    environment_without_kvnode,
    hosts,
)

DEPLOY = REPO / "deploy"
UNIT_PYTHON = "/opt/kvnode/.venv/bin/python"  # where deploy/README.md installs kvnode


def unit_command() -> list[str]:
    """ExecStart of deploy/kvnode.service, with this test's Python in place of the installed one."""
    unit = configparser.ConfigParser(interpolation=None, strict=False)
    unit.read(DEPLOY / "kvnode.service")
    command = shlex.split(unit["Service"]["ExecStart"])
    assert command[0] == UNIT_PYTHON and unit["Service"]["EnvironmentFile"] == "/etc/kvnode/kvnode.env"
    return [sys.executable, *command[1:]]


def example_environment() -> dict[str, str]:
    """deploy/kvnode.env's variables, as systemd's EnvironmentFile reads them."""
    lines = (DEPLOY / "kvnode.env").read_text().splitlines()
    return dict(line.split("=", 1) for line in lines if line.strip() and not line.startswith("#"))


def machine_environment(
    example: dict[str, str], host: str, addresses: list[str], data: Path
) -> dict[str, str]:
    """The example with this machine's address and the test's hosts in place of the example's, and the
    data dir and secret file under ``data``: nothing else changed."""
    example_hosts = [url.split("//")[1].split(":")[0] for url in example["KVNODE_CLUSTER"].split(",")]
    assert example["KVNODE_HOST"] == example_hosts[0]
    cluster = example["KVNODE_CLUSTER"]
    for old, new in zip(example_hosts, addresses, strict=True):
        cluster = cluster.replace(f"//{old}:", f"//{new}:")
    secret = data.parent / "cluster.secret"
    return {
        **example,
        "KVNODE_HOST": host,
        "KVNODE_CLUSTER": cluster,
        "KVNODE_DATA_DIR": str(data),
        "KVNODE_CLUSTER_SECRET_FILE": str(secret),
    }


@pytest.fixture(scope="module")
def deployed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MultiHostCluster]:
    roles = {f"n{host_part}": host_part for host_part in NODE_HOSTS}
    with hosts(roles) as (network, client):
        tmp = tmp_path_factory.mktemp("deploy")
        secret = tmp / "cluster.secret"
        secret.write_text("a-secret-shared-by-the-test-hosts-only\n")
        secret.chmod(0o600)
        addresses = [f"{SUBNET}.{host_part}" for host_part in NODE_HOSTS]
        example = example_environment()
        nodes = []
        for role, address in zip(roles, addresses, strict=True):
            env = {
                **environment_without_kvnode(),
                **machine_environment(example, address, addresses, tmp / role),
            }
            nodes.append(
                NamespacedNode(network.name(role), address, unit_command(), env, tmp / f"{role}.log")
            )
        with MultiHostCluster(client, nodes).running() as cluster:
            yield cluster


def test_the_example_environment_is_the_units_whole_configuration() -> None:
    example = example_environment()
    assert example["KVNODE_PORT"] == str(PORT)
    assert set(example) == {
        "KVNODE_HOST", "KVNODE_PORT", "KVNODE_DATA_DIR", "KVNODE_CLUSTER", "KVNODE_CLUSTER_SECRET_FILE",
    }  # fmt: skip


def test_a_write_on_one_host_is_read_on_another(deployed: MultiHostCluster) -> None:
    first, *_, last = deployed.nodes
    assert deployed.request(first, "PUT", "deployed", b"on three hosts").status == 201
    answer = deployed.request(last, "GET", "deployed")
    assert (answer.status, answer.body) == (200, b"on three hosts")


def admin_status(cluster: MultiHostCluster) -> dict[str, Any]:
    """deploy/README.md's check, ``admin status``, run on the client's host; its JSON."""
    client_namespace = cluster.nodes[0].namespace.rsplit("-", 1)[0] + "-client"
    admin = [sys.executable, "-m", "kvnode", "admin", "--url", cluster.nodes[0].url, "status", "--json"]
    result = subprocess.run(
        inside(client_namespace, admin),
        capture_output=True, text=True, timeout=DEADLINE, env=environment_without_kvnode(),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    status: dict[str, Any] = json.loads(result.stdout)
    return status


def test_the_readmes_check_says_every_member_is_normal_and_reachable(deployed: MultiHostCluster) -> None:
    def every_member_up() -> bool:
        members = admin_status(deployed)["members"]
        normal = [member["membership_state"] == "normal" for member in members]
        return len(members) == 3 and all(normal) and all(m["self"] or m["reachable"] for m in members)

    wait_for(every_member_up, DEADLINE, "every member normal and reachable in admin status")


def test_the_guides_tls_step_makes_a_certificate_each_machine_is_verified_by(tmp_path: Path) -> None:
    secure = "/root/kvnode-secure"  # the guide's directory, moved under tmp_path
    block = guide_block("### Client tokens and TLS")
    assert secure in block
    run_block(block.replace(secure, str(tmp_path / "secure")), tmp_path)
    files = tmp_path / "secure"
    assert {path.stat().st_mode & 0o777 for path in files.iterdir()} == {0o600}
    tokens = read_tokens_file(files / "tokens.txt")
    assert tokens.role_of(f"Bearer {(files / 'admin.token').read_text().strip()}") == "admin"
    example = example_environment()
    urls = tuple(url.replace("http://", "https://") for url in example["KVNODE_CLUSTER"].split(","))
    hosts = [url.split("//")[1].split(":")[0] for url in urls]

    def machine(host: str) -> NodeConfig:
        """A member with the guide's files for this host, as kvnode.env names them once uncommented."""
        return NodeConfig(
            host=host, port=int(example["KVNODE_PORT"]), cluster=urls, tls_cert=files / f"{host}.crt",
            tls_key=files / f"{host}.key", tls_ca=files / "ca.crt",
        )  # fmt: skip

    for host, peer in zip(hosts, [*hosts[1:], hosts[0]], strict=True):
        served, connecting = server_context(machine(host)), client_context(machine(peer))
        assert served is not None and connecting is not None
        handshake(served, connecting, host)
        with pytest.raises(ssl.SSLCertVerificationError):
            handshake(served, connecting, peer)  # another machine's address: refused


def test_the_examples_commented_guards_are_node_variables() -> None:
    """kvnode.env's lines for tokens and TLS, once uncommented, are variables the node reads."""
    lines = (DEPLOY / "kvnode.env").read_text().splitlines()
    commented = dict(line[1:].split("=", 1) for line in lines if re.match(r"#KVNODE_\w+=", line))
    assert set(commented) == {"KVNODE_AUTH_TOKENS_FILE", "KVNODE_TLS_CERT", "KVNODE_TLS_KEY", "KVNODE_TLS_CA"}
    assert unknown_variables(commented) == []
