#!/usr/bin/env python
"""Where this pod's kvnode member is: its zone, and its datacenter, from the topology labels of the
Kubernetes node it runs on, as flags for kvnode-member.sh. The StatefulSet's init container ``places``
runs it (statefulset.yaml), as a ServiceAccount that may get pods and nodes (places-rbac.yaml); it writes
the flags, space-separated, to PLACES_FILE, and says what it found in one line on stderr.

- A first member (ordinal below INITIAL_MEMBERS) is given every first member's zone, in ordinal order and
  the same on each (``--zones``, ``--datacenters``): it waits until every first pod is scheduled and reads
  each one's. A pod a scale-up added joins: ``--zone`` and ``--datacenter``, its own.
- The zone is ZONE_LABEL (topology.kubernetes.io/zone), the datacenter DATACENTER_LABEL
  (topology.kubernetes.io/region: a region is what kvnode calls a datacenter, tens of milliseconds away;
  "" leaves datacenters out). Each is read from the pod where Kubernetes copied its node's topology labels
  onto it (the PodTopologyLabelsAdmission feature, 1.33 on), else from its node.
- Where a first member's node lacks a label, that flag is left out for all (each member its own zone,
  one datacenter): a list with a hole in it would be refused.
- Where the data dir already holds the member's data (any start but the first), nothing: the stored
  membership rules, and a pod restarted elsewhere does not wait for its peers' pods.

The API is reached as every pod reaches it: KUBERNETES_SERVICE_HOST and _PORT, the ServiceAccount's token
and CA in SERVICEACCOUNT_DIR (/var/run/secrets/kubernetes.io/serviceaccount).
"""

from __future__ import annotations

import json
import os
import ssl
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ZONE_LABEL = "topology.kubernetes.io/zone"
REGION_LABEL = "topology.kubernetes.io/region"
SERVICEACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
SCHEDULED_DEADLINE_S = 600.0  # for the first pods to be scheduled; then fail, and the kubelet tries again
POLL_S = 2.0


def flags(ordinal: int, initial_members: int, zones: Sequence[str], datacenters: Sequence[str]) -> list[str]:
    """The flags for the member of ``ordinal``, given the labels read ("" where a node has none): every
    first member's, in ordinal order, for a first member; its own alone for one that joins.

    >>> flags(0, 3, ["a", "b", "c"], ["r", "r", "r"])
    ['--zones', 'a,b,c', '--datacenters', 'r,r,r']
    >>> flags(3, 3, ["b"], [""])
    ['--zone', 'b']
    >>> flags(1, 3, ["a", "", "c"], ["r", "r", "r"])
    ['--datacenters', 'r,r,r']
    """
    first = ordinal < initial_members
    found = []
    for names, many, one in ((zones, "--zones", "--zone"), (datacenters, "--datacenters", "--datacenter")):
        if names and all(names):
            found += [many, ",".join(names)] if first else [one, names[0]]
    return found


def label(pod: dict[str, Any], node: dict[str, Any] | None, name: str) -> str:
    """A topology label of a pod's node: copied onto the pod, else on the node itself ("": none)."""
    if not name:
        return ""
    on_pod: str = pod.get("metadata", {}).get("labels", {}).get(name, "")
    if on_pod or node is None:
        return on_pod
    on_node: str = node.get("metadata", {}).get("labels", {}).get(name, "")
    return on_node


class Api:
    """GETs of the Kubernetes API as this pod's ServiceAccount."""

    def __init__(self, environ: dict[str, str]) -> None:
        account = Path(environ.get("SERVICEACCOUNT_DIR", SERVICEACCOUNT_DIR))
        host, port = environ["KUBERNETES_SERVICE_HOST"], environ["KUBERNETES_SERVICE_PORT"]
        self.base = f"https://{host}:{port}" if ":" not in host else f"https://[{host}]:{port}"
        self.token = (account / "token").read_text().strip()
        self.context = ssl.create_default_context(cafile=str(account / "ca.crt"))

    def get(self, path: str) -> dict[str, Any]:
        request = urllib.request.Request(self.base + path, headers={"Authorization": f"Bearer {self.token}"})
        with urllib.request.urlopen(request, timeout=10, context=self.context) as answer:
            found: dict[str, Any] = json.load(answer)
            return found


def scheduled_pod(api: Api, namespace: str, name: str, deadline: float) -> dict[str, Any]:
    """The pod once the scheduler has given it a node."""
    path = f"/api/v1/namespaces/{urllib.parse.quote(namespace)}/pods/{urllib.parse.quote(name)}"
    while True:
        try:
            pod = api.get(path)
        except urllib.error.HTTPError as error:
            if error.code != 404:  # a first pod not created yet is waited for; anything else is an answer
                raise
            pod = {}
        if pod.get("spec", {}).get("nodeName"):
            return pod
        if time.monotonic() > deadline:
            raise TimeoutError(f"pod {name} was not scheduled within {SCHEDULED_DEADLINE_S:.0f} s")
        time.sleep(POLL_S)


def places(
    api: Api, namespace: str, pods: Sequence[str], zone_label: str, dc_label: str
) -> tuple[list[str], list[str]]:
    """Each pod's zone and datacenter labels, in order ("" where its node has none)."""
    deadline = time.monotonic() + SCHEDULED_DEADLINE_S
    zones, datacenters = [], []
    for pod_name in pods:
        pod = scheduled_pod(api, namespace, pod_name, deadline)
        wanted = [name for name in (zone_label, dc_label) if name]
        on_pod = all(label(pod, None, name) for name in wanted)  # the node need not be asked
        node = None if on_pod else api.get(f"/api/v1/nodes/{urllib.parse.quote(pod['spec']['nodeName'])}")
        zones.append(label(pod, node, zone_label))
        datacenters.append(label(pod, node, dc_label))
    return zones, datacenters


def holds_data(data_dir: str) -> bool:
    path = Path(data_dir)
    return path.is_dir() and any(path.iterdir())


def main(environ: dict[str, str]) -> int:
    out = Path(environ["PLACES_FILE"])
    pod_name, namespace = environ["POD_NAME"], environ["POD_NAMESPACE"]
    statefulset, _, ordinal_text = pod_name.rpartition("-")
    ordinal, initial = int(ordinal_text), int(environ["INITIAL_MEMBERS"])
    if holds_data(environ["KVNODE_DATA_DIR"]):
        out.write_text("")
        said = f"{pod_name} holds its data: the stored membership says where it is"
        print(f"kvnode-places: {said}", file=sys.stderr)
        return 0
    zone_label = environ.get("ZONE_LABEL", ZONE_LABEL)
    dc_label = environ.get("DATACENTER_LABEL", REGION_LABEL)
    pods = [f"{statefulset}-{index}" for index in range(initial)] if ordinal < initial else [pod_name]
    try:
        zones, datacenters = places(Api(environ), namespace, pods, zone_label, dc_label)
    except (OSError, TimeoutError, KeyError, ValueError) as error:
        said = f"cannot read the topology labels of {', '.join(pods)}: {error}"
        print(f"kvnode-places: {said}", file=sys.stderr)
        return 1
    found = flags(ordinal, initial, zones, datacenters)
    out.write_text(" ".join(found))
    missing = [pod for pod, zone in zip(pods, zones, strict=True) if not zone]
    said = " ".join(found) or "no flags"
    if missing:
        said += f" ({', '.join(missing)} without {zone_label}: each member its own zone)"
    print(f"kvnode-places: {pod_name}: {said}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(dict(os.environ)))
