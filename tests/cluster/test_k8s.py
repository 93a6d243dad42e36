"""deploy/k8s/ and deploy/Dockerfile as written, checked offline: every manifest validates against
Kubernetes' schemas in strict mode (no field a schema lacks), with kubernetes-validate's bundled schemas;
the command lines that the image and the StatefulSet's pods run parse, with the node's own parser, into
the node meant (a cluster of one in the image alone; a first member, and a pod a scale-up added, which
joins); deploy/README.md's step that makes the Secrets, run as written, gives files that the node takes
once the pods' start script has copied them from where the kubelet mounts them, and certificates by
which members and clients verify each other under their stable names."""

from __future__ import annotations

import contextlib
import doctest
import importlib.util
import json
import os
import re
import shlex
import shutil
import ssl
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import kubernetes_validate
import pytest
import yaml

from kvnode.access.client_auth import BadTokensFile, read_tokens_file
from kvnode.access.tls import client_context, server_context, verifying_context
from kvnode.config import NodeConfig
from kvnode.ops.certs import ClusterCertificates
from kvnode.ops.flags import parse_args, read_cluster_secret, unknown_variables
from tests.canned_http import Answer, Sent, canned_server
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


def init_container() -> dict[str, Any]:
    (only,) = pod_spec()["initContainers"]
    assert isinstance(only, dict)
    return only


def container_env(of: dict[str, Any] | None = None) -> dict[str, str]:
    """The container's (or ``of``'s) plain variables (``value``); those from the downward API are the
    test's to give."""
    return {item["name"]: item["value"] for item in (of or container())["env"] if "value" in item}


def volume_mount(name: str, of: dict[str, Any] | None = None) -> str:
    (path,) = [mount["mountPath"] for mount in (of or container())["volumeMounts"] if mount["name"] == name]
    return str(path)


# --- the schemas ----------------------------------------------------------------------------------------


def test_there_are_the_objects_of_a_kvnode_cluster_and_the_access_its_init_container_needs() -> None:
    kinds = sorted(document["kind"] for document in documents())
    cluster = ["PodDisruptionBudget", "Service", "Service", "StatefulSet"]
    access = ["ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "ServiceAccount"]
    assert kinds == sorted(cluster + access)


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


def start_pod(ordinal: int, secret_files: Path, root: Path, places: str | None = None) -> Pod:
    """deploy/k8s/kvnode-member.sh with the container's environment, the downward API's pod name and
    namespace, and every volume under ``root``; ``python`` on its PATH records what it is run with.
    ``places``: what the init container wrote to the places file (None: no file)."""
    env = container_env()
    mount, private = root / "mount", root / "private"
    kubelet_mount(secret_files, mount, mounted_keys())
    private.mkdir()
    if places is not None:
        assert Path(env["PLACES_FILE"]).parent == Path(env["PRIVATE_SECRETS"])
        (private / Path(env["PLACES_FILE"]).name).write_text(places)
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


# --- where each member is: its zone and datacenter from its node's topology labels ------------------------

PLACES = DEPLOY / "k8s" / "kvnode-places.py"
TOKEN = "a-service-account-token"
ZONE, REGION = "topology.kubernetes.io/zone", "topology.kubernetes.io/region"


def places_script() -> ModuleType:
    """deploy/k8s/kvnode-places.py as a module (its name is the image's command, not an importable one)."""
    spec = importlib.util.spec_from_file_location("kvnode_places", PLACES)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def of_name(kind: str, name: str) -> dict[str, Any]:
    (found,) = [document for document in of_kind(kind) if document["metadata"]["name"] == name]
    return found


def test_only_the_init_container_holds_the_service_accounts_token() -> None:
    spec = pod_spec()
    (account,) = of_kind("ServiceAccount")
    assert spec["serviceAccountName"] == account["metadata"]["name"]
    assert spec["automountServiceAccountToken"] is False and account["automountServiceAccountToken"] is False
    (access,) = [volume["projected"] for volume in spec["volumes"] if volume["name"] == "api-access"]
    assert {"serviceAccountToken", "configMap", "downwardAPI"} == {
        key for s in access["sources"] for key in s
    }
    assert volume_mount("api-access", init_container()) == places_script().SERVICEACCOUNT_DIR
    assert "api-access" not in [mount["name"] for mount in container()["volumeMounts"]]


def test_the_access_granted_is_reading_pods_and_nodes_and_nothing_else() -> None:
    (account,) = of_kind("ServiceAccount")
    (role,), (cluster_role,) = of_kind("Role"), of_kind("ClusterRole")
    assert role["rules"] == [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]
    assert cluster_role["rules"] == [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]}]
    for kind, granted in (("RoleBinding", role), ("ClusterRoleBinding", cluster_role)):
        (binding,) = of_kind(kind)
        assert binding["roleRef"]["kind"] == granted["kind"]
        assert binding["roleRef"]["name"] == granted["metadata"]["name"]
        (subject,) = binding["subjects"]
        assert (subject["kind"], subject["name"]) == ("ServiceAccount", account["metadata"]["name"])
    # A ClusterRoleBinding names the ServiceAccount's namespace: the README's.
    assert of_kind("ClusterRoleBinding")[0]["subjects"][0]["namespace"] == NAMESPACE


def test_the_init_container_runs_what_the_image_installs_and_agrees_with_the_member() -> None:
    places = init_container()
    assert places["command"] == [Image.read().copied_to(str(PLACES.relative_to(REPO)))]
    assert os.access(PLACES, os.X_OK)
    shared = ("INITIAL_MEMBERS", "KVNODE_DATA_DIR", "PLACES_FILE")
    assert {name: container_env(places)[name] for name in shared} == {
        name: container_env()[name] for name in shared
    }
    for volume in ("data", "private-secrets"):
        assert volume_mount(volume, places) == volume_mount(volume)
    (data,) = [mount for mount in places["volumeMounts"] if mount["name"] == "data"]
    assert data["readOnly"] is True  # it only looks whether the volume holds data
    assert (container_env(places)["ZONE_LABEL"], container_env(places)["DATACENTER_LABEL"]) == (ZONE, REGION)


def test_the_places_scripts_examples_hold() -> None:
    failed, tried = doctest.testmod(places_script())
    assert tried > 0 and failed == 0


def test_the_labels_become_every_first_members_flags_in_order_or_a_joining_pods_own() -> None:
    flags = places_script().flags
    assert flags(2, 3, ["a", "b", "c"], ["eu", "eu", "eu"]) == [
        "--zones",
        "a,b,c",
        "--datacenters",
        "eu,eu,eu",
    ]
    assert flags(0, 3, ["a", "b", "c"], ["", "", ""]) == ["--zones", "a,b,c"]  # nodes without a region
    assert flags(0, 3, ["a", "", "c"], ["eu", "eu", "eu"]) == ["--datacenters", "eu,eu,eu"]  # a hole
    assert flags(3, 3, ["c"], ["eu"]) == ["--zone", "c", "--datacenter", "eu"]
    assert flags(3, 3, [""], [""]) == []


def test_a_label_is_read_from_the_pod_where_kubernetes_copied_it_there_else_from_its_node() -> None:
    label = places_script().label
    pod = {"metadata": {"labels": {ZONE: "on-pod"}}}
    node = {"metadata": {"labels": {ZONE: "on-node", REGION: "eu"}}}
    assert (label(pod, node, ZONE), label(pod, node, REGION)) == ("on-pod", "eu")
    assert label({}, None, ZONE) == "" and label(pod, node, "") == ""


@dataclass
class FakeApi:
    """The Kubernetes API as the init container reads it: pods by name (each on a node once scheduled,
    with labels of its own) and nodes' labels; every path asked, in order, each with its token."""

    pods: dict[str, dict[str, Any]]
    nodes: dict[str, dict[str, str]]
    unscheduled_reads: dict[str, int] = field(default_factory=dict)  # a pod's first reads without a node
    requests: list[Sent] = field(default_factory=list)

    @property
    def asked(self) -> list[str]:
        assert {sent.headers["Authorization"] for sent in self.requests} <= {f"Bearer {TOKEN}"}
        return [sent.path for sent in self.requests]

    def answer(self, path: str) -> Answer:
        pod = re.fullmatch(rf"/api/v1/namespaces/{NAMESPACE}/pods/([\w-]+)", path)
        node = re.fullmatch(r"/api/v1/nodes/([\w-]+)", path)
        if pod is not None and pod[1] in self.pods:
            found = self.pods[pod[1]]
            waiting = self.unscheduled_reads.get(pod[1], 0)
            self.unscheduled_reads[pod[1]] = waiting - 1
            spec = {} if waiting > 0 else {"nodeName": found["node"]}
            return _json({"metadata": {"name": pod[1], "labels": found.get("labels", {})}, "spec": spec})
        if node is not None and node[1] in self.nodes:
            return _json({"metadata": {"name": node[1], "labels": self.nodes[node[1]]}})
        return Answer(404, json.dumps({"kind": "Status", "code": 404}).encode())


def _json(found: dict[str, Any]) -> Answer:
    return Answer(200, json.dumps(found).encode())


@contextlib.contextmanager
def serving(api: FakeApi, certificates: Path) -> Iterator[int]:
    """``api`` over HTTPS on a loopback port (its certificate names 127.0.0.1); the port."""
    served = ClusterCertificates(certificates).node("api")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(served.cert, served.key)
    with canned_server(api.answer, tls=context) as server:
        api.requests = server.requests
        yield int(server.url.rsplit(":", 1)[1])


@pytest.fixture(scope="module")
def api_certificates(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if shutil.which("openssl") is None:
        pytest.skip("needs the openssl command (apt-get install openssl)")
    directory = tmp_path_factory.mktemp("api-tls")
    ClusterCertificates(directory).make(["api"])
    return directory


def run_places(
    ordinal: int, api: FakeApi, certificates: Path, root: Path, data: bool = False
) -> tuple[str, str]:
    """The init container's script for pod ``ordinal``, its environment the manifest's, its volumes under
    ``root``, the API ``api``: what it wrote to the places file, and what it said."""
    env = container_env(init_container())
    account = root / "serviceaccount"
    account.mkdir()
    (account / "token").write_text(TOKEN + "\n")
    (account / "ca.crt").write_bytes(ClusterCertificates(certificates).ca.read_bytes())
    data_dir = root / "volume" / "data"
    data_dir.mkdir(parents=True)
    if data:
        (data_dir / "CURRENT").write_text("a member's data\n")
    with serving(api, certificates) as port:
        done = subprocess.run(
            [sys.executable, str(PLACES)],
            env={**env, "POD_NAME": f"kvnode-{ordinal}", "POD_NAMESPACE": NAMESPACE,
                 "KVNODE_DATA_DIR": str(data_dir), "PLACES_FILE": str(root / "places"),
                 "KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": str(port),
                 "SERVICEACCOUNT_DIR": str(account), "PATH": os.environ["PATH"]},
            capture_output=True, text=True, timeout=DEADLINE,
        )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stderr.count("\n") == 1, done.stderr
    return (root / "places").read_text(), done.stderr


def three_nodes(zones: dict[str, str] | None = None) -> dict[str, dict[str, str]]:
    zones = zones if zones is not None else {"node-a": "zone-a", "node-b": "zone-b", "node-c": "zone-c"}
    return {node: {REGION: "eu-west-1"} | ({ZONE: zone} if zone else {}) for node, zone in zones.items()}


FIRST_PODS = {"kvnode-0": {"node": "node-b"}, "kvnode-1": {"node": "node-a"}, "kvnode-2": {"node": "node-c"}}


def test_a_first_member_waits_for_every_first_pod_and_takes_their_nodes_zones_in_ordinal_order(
    api_certificates: Path, tmp_path: Path
) -> None:
    api = FakeApi(FIRST_PODS, three_nodes(), unscheduled_reads={"kvnode-2": 1})
    written, said = run_places(1, api, api_certificates, tmp_path)
    assert written == "--zones zone-b,zone-a,zone-c --datacenters eu-west-1,eu-west-1,eu-west-1"
    assert said == f"kvnode-places: kvnode-1: {written}\n"
    assert api.asked.count(f"/api/v1/namespaces/{NAMESPACE}/pods/kvnode-2") == 2  # read until scheduled
    assert sorted(path for path in api.asked if "/nodes/" in path) == [
        f"/api/v1/nodes/node-{name}" for name in "abc"
    ]


def test_labels_kubernetes_copied_onto_the_pods_are_read_without_asking_for_the_nodes(
    api_certificates: Path, tmp_path: Path
) -> None:
    pods = {name: {**pod, "labels": {ZONE: f"on-{name}", REGION: "eu"}} for name, pod in FIRST_PODS.items()}
    api = FakeApi(pods, nodes={})
    written, _ = run_places(0, api, api_certificates, tmp_path)
    assert written == "--zones on-kvnode-0,on-kvnode-1,on-kvnode-2 --datacenters eu,eu,eu"
    assert not [path for path in api.asked if "/nodes/" in path]


def test_a_first_members_node_without_a_zone_leaves_the_zones_out_and_says_so(
    api_certificates: Path, tmp_path: Path
) -> None:
    api = FakeApi(FIRST_PODS, three_nodes({"node-a": "zone-a", "node-b": "zone-b", "node-c": ""}))
    written, said = run_places(0, api, api_certificates, tmp_path)
    assert written == "--datacenters eu-west-1,eu-west-1,eu-west-1"
    assert f"kvnode-2 without {ZONE}: each member its own zone" in said


def test_a_pod_a_scale_up_added_takes_its_own_nodes_zone_and_asks_for_no_other(
    api_certificates: Path, tmp_path: Path
) -> None:
    api = FakeApi({**FIRST_PODS, "kvnode-3": {"node": "node-c"}}, three_nodes())
    written, _ = run_places(3, api, api_certificates, tmp_path)
    assert written == "--zone zone-c --datacenter eu-west-1"
    assert api.asked == [f"/api/v1/namespaces/{NAMESPACE}/pods/kvnode-3", "/api/v1/nodes/node-c"]


def test_a_member_whose_volume_holds_its_data_asks_for_nothing(
    api_certificates: Path, tmp_path: Path
) -> None:
    api = FakeApi(FIRST_PODS, three_nodes())
    written, said = run_places(0, api, api_certificates, tmp_path, data=True)
    assert (written, api.asked) == ("", [])
    assert "the stored membership says where it is" in said


def test_the_member_script_hands_the_places_to_the_node(secret_files: Path, tmp_path: Path) -> None:
    first = start_pod(0, secret_files, tmp_path / "first", places="--zones a,b,c --datacenters eu,eu,eu")
    assert (first.config().zones, first.config().datacenters) == (("a", "b", "c"), ("eu", "eu", "eu"))
    added = start_pod(3, secret_files, tmp_path / "added", places="--zone b --datacenter eu")
    assert (added.config().zone, added.config().datacenter, added.config().join) == ("b", "eu", member_url(0))
    for places in ("", None):  # a restart (nothing written), or a pod started without the init container
        plain = start_pod(0, secret_files, tmp_path / f"plain-{places}", places=places)
        assert (plain.config().zones, plain.config().datacenters) == ((), ())
