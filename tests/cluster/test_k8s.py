"""deploy/k8s/ and deploy/Dockerfile as written, checked offline: every manifest validates against
Kubernetes' schemas in strict mode (no field a schema lacks), with kubernetes-validate's bundled schemas;
the command lines that the image and the StatefulSet's pods run parse, with the node's own parser, into
the node meant (a cluster of one in the image alone; a first member, and a pod a scale-up added, which
joins); deploy/README.md's step that makes the Secrets, run as written, gives files that the node takes
once the pods' start script has copied them from where the kubelet mounts them, and certificates by
which members and clients verify each other under their stable names."""

from __future__ import annotations

import json
import os
import re
import shlex
import ssl
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from kvnode.access.client_auth import BadTokensFile, read_tokens_file
from kvnode.access.tls import client_context, server_context, verifying_context
from kvnode.config import NodeConfig
from kvnode.ops.flags import parse_args, read_cluster_secret, unknown_variables
from tests.deploy_guide import GUIDE, guide_block, handshake, run_block
from tests.harness import DEADLINE, REPO

DEPLOY = REPO / "deploy"
MANIFESTS = sorted((DEPLOY / "k8s").glob("*.yaml"))
# The oldest Kubernetes deploy/README.md names (persistentVolumeClaimRetentionPolicy on by default), and
# the newest whose schemas kubernetes-validate bundles.
KUBERNETES_VERSIONS = ("1.27", kubernetes_validate.utils.latest_version())
NAMESPACE = "default"  # deploy/README.md's, as its Secrets step names it


def documents() -> list[dict[str, Any]]:
    return [document for path in MANIFESTS for document in yaml.safe_load_all(path.read_text()) if document]


def of_kind(kind: str) -> list[dict[str, Any]]:
    return [document for document in documents() if document["kind"] == kind]


def statefulset() -> dict[str, Any]:
    (only,) = of_kind("StatefulSet")
    return only


def pod_spec() -> dict[str, Any]:
    spec: dict[str, Any] = statefulset()["spec"]["template"]["spec"]
    return spec


def container() -> dict[str, Any]:
    (only,) = pod_spec()["containers"]
    assert isinstance(only, dict)
    return only


def container_env() -> dict[str, str]:
    """The container's plain variables (``value``); those from the downward API are the test's to give."""
    return {item["name"]: item["value"] for item in container()["env"] if "value" in item}


def volume_mount(name: str) -> str:
    (path,) = [mount["mountPath"] for mount in container()["volumeMounts"] if mount["name"] == name]
    return str(path)


# --- the schemas ----------------------------------------------------------------------------------------


def test_there_are_the_four_objects_of_a_kvnode_cluster() -> None:
    kinds = sorted(document["kind"] for document in documents())
    assert kinds == ["PodDisruptionBudget", "Service", "Service", "StatefulSet"]


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
@pytest.mark.parametrize("path", MANIFESTS, ids=lambda path: path.name)
def test_every_manifest_validates_strictly_against_the_kubernetes_schemas(path: Path, version: str) -> None:
    for document in yaml.safe_load_all(path.read_text()):
        kubernetes_validate.validate(document, version, strict=True)


def test_the_strict_validation_refuses_a_misspelt_field() -> None:
    misspelt = statefulset()
    misspelt["spec"]["podManagmentPolicy"] = misspelt["spec"].pop("podManagementPolicy")
    with pytest.raises(kubernetes_validate.ValidationError, match="podManagmentPolicy"):
        kubernetes_validate.validate(misspelt, KUBERNETES_VERSIONS[-1], strict=True)


# --- the objects fit together ------------------------------------------------------------------------------


def test_the_services_and_the_budget_select_the_members() -> None:
    labels = statefulset()["spec"]["template"]["metadata"]["labels"]
    assert statefulset()["spec"]["selector"]["matchLabels"] == labels
    for service in of_kind("Service"):
        assert service["spec"]["selector"] == labels
        (port,) = service["spec"]["ports"]
        assert port["targetPort"] == container()["ports"][0]["name"]
    (budget,) = of_kind("PodDisruptionBudget")
    assert budget["spec"] == {"maxUnavailable": 1, "selector": {"matchLabels": labels}}


def test_the_members_find_each_other_under_the_headless_service_before_they_are_ready() -> None:
    """A new member is ready only once a peer has told it whether its data is whole: the members must
    resolve each other's names before, and start together (OrderedReady would wait on the first)."""
    spec = statefulset()["spec"]
    (headless,) = [s for s in of_kind("Service") if s["spec"].get("clusterIP") == "None"]
    assert spec["serviceName"] == headless["metadata"]["name"] == container_env()["PEER_SERVICE"]
    assert headless["spec"]["publishNotReadyAddresses"] is True
    assert spec["podManagementPolicy"] == "Parallel"


def test_each_member_keeps_its_data_on_its_own_volume_which_a_scale_down_drops() -> None:
    spec = statefulset()["spec"]
    (claim,) = spec["volumeClaimTemplates"]
    assert Path(container_env()["KVNODE_DATA_DIR"]).parent == Path(volume_mount(claim["metadata"]["name"]))
    assert spec["persistentVolumeClaimRetentionPolicy"] == {"whenScaled": "Delete", "whenDeleted": "Retain"}


def test_the_first_members_set_the_replication_factor_once() -> None:
    env = container_env()
    replicas = statefulset()["spec"]["replicas"]
    assert int(env["INITIAL_MEMBERS"]) == replicas
    assert 1 <= int(env["KVNODE_REPLICATION_FACTOR"]) <= replicas


def test_readiness_asks_whether_the_data_is_whole_and_liveness_only_whether_the_node_serves() -> None:
    scheme = "HTTPS" if "KVNODE_TLS_CERT" in container_env() else "HTTP"
    probes = {
        name: container()[name]["httpGet"] for name in ("startupProbe", "livenessProbe", "readinessProbe")
    }
    assert {probe["scheme"] for probe in probes.values()} == {scheme}
    assert {probe["port"] for probe in probes.values()} == {container()["ports"][0]["name"]}
    assert probes["startupProbe"]["path"] == probes["livenessProbe"]["path"] == "/v0/status"
    assert probes["readinessProbe"]["path"] == "/v0/status?ready"  # tests/unit/kvnode/node/test_client_api.py


def test_a_stop_has_the_time_a_clean_stop_takes() -> None:
    """The node waits up to 10 s for requests in flight, and as long again for uploads under way."""
    assert pod_spec()["terminationGracePeriodSeconds"] >= 30


# --- the image -------------------------------------------------------------------------------------------


@dataclass
class Image:
    """The last stage of deploy/Dockerfile: its instructions, each (KEYWORD, arguments)."""

    instructions: list[tuple[str, str]]

    @classmethod
    def read(cls) -> Image:
        text = re.sub(r"\\\n", " ", (DEPLOY / "Dockerfile").read_text())
        lines = [line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#")]
        instructions = [
            (keyword.upper(), rest) for keyword, _, rest in (line.partition(" ") for line in lines)
        ]
        last_from = max(index for index, (keyword, _) in enumerate(instructions) if keyword == "FROM")
        return cls(instructions[last_from:])

    def one(self, keyword: str) -> str:
        (arguments,) = [rest for word, rest in self.instructions if word == keyword]
        return arguments

    def command(self) -> list[str]:
        argv: list[str] = json.loads(self.one("ENTRYPOINT")) + json.loads(self.one("CMD"))
        return argv

    def copied_to(self, source: str) -> str:
        (target,) = [
            rest.split()[-1] for word, rest in self.instructions if word == "COPY" and source in rest
        ]
        return target


def test_the_image_alone_runs_a_node_of_one_with_its_data_on_the_volume() -> None:
    image = Image.read()
    python, flag, module, *args = image.command()
    assert (python, flag, module) == ("python", "-m", "kvnode")
    assert "PATH=/opt/kvnode/bin:" in image.one("ENV")  # the virtual environment's python
    config = parse_args(args, {})
    assert isinstance(config, NodeConfig)
    assert config.cluster == () and config.host == "0.0.0.0" and str(config.port) == image.one("EXPOSE")
    assert config.data_dir.parent == Path(image.one("VOLUME"))


def test_the_image_installs_kvnode_without_extras_and_runs_it_as_an_unprivileged_user() -> None:
    text = (DEPLOY / "Dockerfile").read_text()
    bases = re.findall(r"^FROM (\S+)", text, re.M)
    assert bases and all(re.fullmatch(r"python:3\.1\d-slim", base) for base in bases)
    (install,) = re.findall(r"pip install .*", text)
    assert install.split()[-1] == "/src", install  # pyproject.toml's dependencies, no extra
    user, group = (int(part) for part in Image.read().one("USER").split(":"))
    assert user > 0 and group > 0
    security = pod_spec()["securityContext"]
    assert security["runAsNonRoot"] is True
    assert (security["runAsUser"], security["runAsGroup"], security["fsGroup"]) == (user, group, group)


def test_the_pods_run_the_start_script_the_image_installs() -> None:
    script = DEPLOY / "k8s" / "kvnode-member.sh"
    assert container()["command"] == [Image.read().copied_to(str(script.relative_to(REPO)))]
    assert os.access(script, os.X_OK)


# --- the Secrets and the pods' start -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def secret_files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """deploy/README.md's step that makes the Secrets' files, run as written (its home: a temporary one)."""
    home = tmp_path_factory.mktemp("home")
    block = guide_block("### The Secrets")
    assert f"NAMESPACE={NAMESPACE} " in block
    run_block(block, home)
    return home / ".kvnode" / "k8s"


def test_the_readmes_secret_files_are_readable_by_their_owner_only(secret_files: Path) -> None:
    modes = {path.name: path.stat().st_mode & 0o777 for path in secret_files.iterdir()}
    names = {"cluster.secret", "tokens.txt", "admin.token", "ca.crt", "ca.key", "tls.crt", "tls.key"}
    assert set(modes) == names and set(modes.values()) == {0o600}


def kubelet_mount(files: Path, mount: Path, keys: list[str]) -> None:
    """The Secrets' keys as the kubelet mounts them: each a link into a hidden directory of the data,
    mode 0440 (the defaultMode, which fsGroup's group read would give anyway)."""
    data = mount / "..2026_12_02_00_00_00.1"
    data.mkdir(parents=True)
    (mount / "..data").symlink_to(data.name)
    for key in keys:
        (data / key).write_bytes((files / key).read_bytes())
        (data / key).chmod(0o440)
        (mount / key).symlink_to(f"..data/{key}")


@dataclass
class Pod:
    """A pod's start script, run as the StatefulSet runs it: what it would run, and with what."""

    argv: list[str]
    env: dict[str, str]
    private: Path
    mount: Path

    def config(self) -> NodeConfig:
        python, flag, module, *args = self.argv
        assert (python, flag, module) == ("python", "-m", "kvnode")
        config = parse_args(args, self.env)
        assert isinstance(config, NodeConfig)
        return config


def projected_secrets() -> dict[str, Any]:
    """The volume of the Secrets' files: one projected from each Secret."""
    (secrets,) = [volume["projected"] for volume in pod_spec()["volumes"] if volume["name"] == "secrets"]
    assert isinstance(secrets, dict)
    return secrets


def mounted_keys() -> list[str]:
    secrets = projected_secrets()
    assert secrets["defaultMode"] & 0o077 == 0o040  # group read only, as fsGroup makes it
    return [item["path"] for source in secrets["sources"] for item in source["secret"]["items"]]


def start_pod(ordinal: int, secret_files: Path, root: Path) -> Pod:
    """deploy/k8s/kvnode-member.sh with the container's environment, the downward API's pod name and
    namespace, and every volume under ``root``; ``python`` on its PATH records what it is run with."""
    env = container_env()
    mount, private = root / "mount", root / "private"
    kubelet_mount(secret_files, mount, mounted_keys())
    private.mkdir()
    mounts = (volume_mount("secrets"), volume_mount("private-secrets"))
    assert (env["MOUNTED_SECRETS"], env["PRIVATE_SECRETS"]) == mounts
    volume = str(Path(env["KVNODE_DATA_DIR"]).parent)
    moved = {
        name: value.replace(env["PRIVATE_SECRETS"], str(private)).replace(volume, str(root / "volume"))
        for name, value in env.items()
    }
    moved.update(MOUNTED_SECRETS=str(mount), PRIVATE_SECRETS=str(private))
    stub = root / "bin" / "python"
    stub.parent.mkdir()
    stub.write_text(
        f"#!{sys.executable}\nimport json, os, pathlib, sys\n"
        "record = {'argv': sys.argv[1:], 'env': dict(os.environ)}\n"
        "pathlib.Path(os.environ['RECORD']).write_text(json.dumps(record))\n"
    )
    stub.chmod(0o755)
    record = root / "record.json"
    pod = {"POD_NAME": f"{statefulset()['metadata']['name']}-{ordinal}", "POD_NAMESPACE": NAMESPACE}
    path = f"{stub.parent}:{os.environ['PATH']}"
    done = subprocess.run(
        [str(DEPLOY / "k8s" / "kvnode-member.sh")],
        env={**moved, **pod, "PATH": path, "RECORD": str(record)},
        capture_output=True, text=True, timeout=DEADLINE,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    recorded = json.loads(record.read_text())
    return Pod(["python", *recorded["argv"]], recorded["env"], private, mount)


def member_url(ordinal: int) -> str:
    name, service = statefulset()["metadata"]["name"], container_env()["PEER_SERVICE"]
    domain = container_env()["CLUSTER_DOMAIN"]
    return f"https://{name}-{ordinal}.{service}.{NAMESPACE}.svc.{domain}:{container_env()['KVNODE_PORT']}"


@pytest.fixture(scope="module")
def first_member(secret_files: Path, tmp_path_factory: pytest.TempPathFactory) -> Pod:
    return start_pod(1, secret_files, tmp_path_factory.mktemp("kvnode-1"))


@pytest.fixture(scope="module")
def added_member(secret_files: Path, tmp_path_factory: pytest.TempPathFactory) -> Pod:
    """The pod a scale-up from the first members to one more adds."""
    return start_pod(int(container_env()["INITIAL_MEMBERS"]), secret_files, tmp_path_factory.mktemp("added"))


def test_a_first_member_starts_with_the_first_members_list(first_member: Pod) -> None:
    config = first_member.config()
    first = int(container_env()["INITIAL_MEMBERS"])
    assert config.cluster == tuple(member_url(ordinal) for ordinal in range(first))
    assert config.url == member_url(1) and config.join == ""
    assert str(config.replication_factor) == container_env()["KVNODE_REPLICATION_FACTOR"]
    assert config.data_dir == Path(first_member.private.parent / "volume" / "data")


def test_a_pod_a_scale_up_added_joins_through_the_first_member(added_member: Pod) -> None:
    config = added_member.config()
    first = int(container_env()["INITIAL_MEMBERS"])
    assert config.join == member_url(0) and config.cluster == () and config.url == member_url(first)


def test_the_node_takes_every_guard_from_the_private_copies(first_member: Pod) -> None:
    config = first_member.config()
    private = first_member.private
    assert config.cluster_secret == (private / "cluster.secret").read_bytes().strip()
    assert config.auth_tokens_file == private / "tokens.txt"
    assert (config.tls_cert, config.tls_key, config.tls_ca) == (
        private / "tls.crt", private / "tls.key", private / "ca.crt",
    )  # fmt: skip
    assert {path.name: path.stat().st_mode & 0o777 for path in private.iterdir()} == dict.fromkeys(
        mounted_keys(), 0o600
    )
    assert unknown_variables(first_member.env) == []


def test_the_node_would_refuse_the_files_as_the_kubelet_mounts_them(first_member: Pod) -> None:
    """Why the start script copies them: group-readable, the secret and the tokens are refused."""
    with pytest.raises(ValueError, match="open to group or others"):
        read_cluster_secret(first_member.mount / "cluster.secret", {})
    with pytest.raises(BadTokensFile, match="open to group or others"):
        read_tokens_file(first_member.mount / "tokens.txt")


def test_the_admin_token_is_one_of_the_admin_tokens(first_member: Pod) -> None:
    tokens = read_tokens_file(first_member.private / "tokens.txt")
    admin = (first_member.private / "admin.token").read_text().strip()
    assert tokens.role_of(f"Bearer {admin}") == "admin"


def host_of(url: str) -> str:
    return url.split("//")[1].rsplit(":", 1)[0]


def test_members_and_clients_verify_the_certificate_by_the_stable_names(
    first_member: Pod, added_member: Pod
) -> None:
    member, peer = server_context(first_member.config()), client_context(added_member.config())
    assert member is not None and peer is not None
    handshake(member, peer, host_of(member_url(1)))  # the replica channel, either way
    clients = verifying_context(first_member.private / "ca.crt")
    for name in (f"kvnode.{NAMESPACE}.svc", "kvnode"):  # the client Service, as in the README
        handshake(member, clients, name)
    with pytest.raises(ssl.SSLCertVerificationError):
        handshake(member, clients, host_of(member_url(1)).replace(NAMESPACE, "another-namespace"))


def test_the_readmes_commands_name_the_objects_as_the_manifests_do() -> None:
    """The README's kubectl lines name the Secrets the StatefulSet mounts, and its leave the URL of a
    pod that a scale-up added."""
    readme = GUIDE.read_text()
    created = set(re.findall(r"create secret generic (\S+)", readme))
    mounted = {source["secret"]["name"] for source in projected_secrets()["sources"]}
    assert created == mounted
    leave = shlex.split(guide_block("### Scaling down").replace("\\\n", " "))
    url = leave[leave.index("leave") + 1].replace("$NAMESPACE", NAMESPACE)
    assert url == member_url(int(container_env()["INITIAL_MEMBERS"]))
