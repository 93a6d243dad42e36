#!/bin/sh
# Starts this pod's member of the kvnode StatefulSet (statefulset.yaml): its URL, and how it enters the
# cluster, follow from the pod's ordinal; every other setting comes from the KVNODE_* variables the
# StatefulSet sets, and extra arguments are passed on to `python -m kvnode node`.
# deploy/Dockerfile installs it as /usr/local/bin/kvnode-member; tests/cluster/test_k8s.py runs it.
set -eu

# The kubelet mounts a Secret's files group-readable at best (fsGroup adds g+r, kubernetes issue 57923),
# and the node refuses a secret or tokens file that its group may read: each is copied, readable by this
# user only, to a memory-backed volume (done again at each start, so an updated Secret is taken then).
for file in "$MOUNTED_SECRETS"/*; do
    install -m 0600 "$file" "$PRIVATE_SECRETS/"
done

scheme=http
if [ -n "${KVNODE_TLS_CERT:-}" ]; then
    scheme=https
fi
statefulset=${POD_NAME%-*}
ordinal=${POD_NAME##*-}

# A member's stable name under the headless Service, which every member and client resolves.
member_url() {
    echo "$scheme://$statefulset-$1.$PEER_SERVICE.$POD_NAMESPACE.svc.$CLUSTER_DOMAIN:$KVNODE_PORT"
}

if [ "$ordinal" -lt "$INITIAL_MEMBERS" ]; then
    # One of the first members: each is given the same list. Once the cluster has grown, a restart names
    # the difference in one warning line and keeps the stored membership.
    entry=--cluster
    how=$(member_url 0)
    i=1
    while [ "$i" -lt "$INITIAL_MEMBERS" ]; do
        how="$how,$(member_url "$i")"
        i=$((i + 1))
    done
else
    # A pod that a scale-up added joins through the first member (ignored once its data dir holds the
    # membership: a restart, or a join resumed).
    entry=--join
    how=$(member_url 0)
fi
# Where this member is, from its node's topology labels (--zones and --datacenters, or --zone and
# --datacenter for a pod that joins): written by the init container at the first start (kvnode-places.py),
# empty once the volume holds data. Left unquoted to split into flags: zone and datacenter names are
# letters, digits, '.', '_' and '-', as label values are.
places=""
if [ -n "${PLACES_FILE:-}" ] && [ -f "$PLACES_FILE" ]; then
    places=$(cat "$PLACES_FILE")
fi
# shellcheck disable=SC2086
exec python -m kvnode node --advertise-url "$(member_url "$ordinal")" "$entry" "$how" $places "$@"
