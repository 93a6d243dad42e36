"""kvnode.replica.channel.handshake: the replica channel's handshake as pure logic: nodes of one cluster prove
themselves to each other, anyone else is refused, a challenge is good once and expires, the secret stays out
of reprs; the protocol ranges both ends say are covered by the server's proof, and a node from before ranges
were said still shakes hands with a newer one either way round."""

from __future__ import annotations

import pytest

from kvnode.replica.channel.handshake import (
    MAX_NONCES,
    NONCE_TTL_S,
    PROOF_HEADER,
    AuthError,
    ClusterAuth,
    Introduction,
    server_proof_ok,
)
from kvnode.replica.channel.protocol import Versions
from kvnode.topology.membership import cluster_identity

SECRET = "s3cret-" * 6
MEMBERS = ("http://a:1", "http://b:1", "http://c:1")
CLUSTER = cluster_identity(MEMBERS)


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


CLIENT_ID, SERVER_ID, OLD_SERVER_ID = "c1" * 16, "5e" * 16, "0e" * 16


def handshake(client: ClusterAuth, server: ClusterAuth, meant: str | None = None) -> Introduction:
    """The client's introduction as the server read it; the server's proof checked by the client."""
    headers, expected = client.upgrade_headers(
        meant or server.own_url, server.issue_nonce(), Introduction(CLIENT_ID, SERVER_ID, OLD_SERVER_ID)
    )
    _, theirs = server.admit(headers)
    assert server_proof_ok(server.answer_headers(headers, Introduction(SERVER_ID, "")), expected)
    return theirs


def test_members_with_the_same_secret_prove_themselves_to_each_other() -> None:
    theirs = handshake(
        ClusterAuth(SECRET.encode(), CLUSTER, MEMBERS[0]), ClusterAuth(SECRET.encode(), CLUSTER, MEMBERS[1])
    )
    assert theirs == Introduction(CLIENT_ID, SERVER_ID, OLD_SERVER_ID)


def test_an_introduction_changed_on_the_way_fails_the_proof() -> None:
    client = ClusterAuth(SECRET.encode(), CLUSTER, MEMBERS[0])
    server = ClusterAuth(SECRET.encode(), CLUSTER, MEMBERS[1])
    headers, expected = client.upgrade_headers(MEMBERS[1], server.issue_nonce(), Introduction(CLIENT_ID))
    with pytest.raises(AuthError, match="wrong proof"):
        server.admit({**headers, "X-Kvnode-Remembered": SERVER_ID})
    headers, expected = client.upgrade_headers(MEMBERS[1], server.issue_nonce(), Introduction(CLIENT_ID))
    with pytest.raises(AuthError, match="wrong proof"):
        server.admit({**headers, "X-Kvnode-Replaced": SERVER_ID})
    headers, expected = client.upgrade_headers(MEMBERS[1], server.issue_nonce(), Introduction(CLIENT_ID))
    server.admit(headers)
    answer = {
        name.lower(): value for name, value in server.answer_headers(headers, Introduction(SERVER_ID)).items()
    }
    assert server_proof_ok(answer, expected)
    assert not server_proof_ok({**answer, "x-kvnode-remembered": CLIENT_ID}, expected)


def test_anything_but_an_identity_reads_as_none_and_anything_but_a_version_as_0() -> None:
    headers = {"X-Kvnode-Identity": "not hex", "x-kvnode-remembered": SERVER_ID, "X-Kvnode-Replaced": "0"}
    assert Introduction.of(headers) == Introduction("", SERVER_ID, "")
    for version in ("-1", "1e3", "٣", "9" * 30, ""):
        assert Introduction.of({"X-Kvnode-Membership-Version": version}).membership == 0
    assert Introduction.of({"x-kvnode-membership-version": "7"}).membership == 7


def test_a_node_not_yet_a_member_proves_itself_with_the_secret_and_the_cluster_identity() -> None:
    """Members at different membership versions, and a node joining, still talk: the proof binds the
    cluster's identity, not its member list; the membership version each end says is covered by it."""
    client = ClusterAuth(SECRET.encode(), CLUSTER, "http://joining:1")
    server = ClusterAuth(SECRET.encode(), CLUSTER, MEMBERS[1])
    headers, expected = client.upgrade_headers(
        MEMBERS[1], server.issue_nonce(), Introduction(CLIENT_ID, membership=4)
    )
    who, theirs = server.admit(headers)
    assert (who, theirs.membership) == ("http://joining:1", 4)
    answer = server.answer_headers(headers, Introduction(SERVER_ID, membership=5))
    assert server_proof_ok(answer, expected)
    assert not server_proof_ok({**answer, "X-Kvnode-Membership-Version": "6"}, expected)
    headers, _ = client.upgrade_headers(
        MEMBERS[1], server.issue_nonce(), Introduction(CLIENT_ID, membership=4)
    )
    with pytest.raises(AuthError, match="wrong proof"):
        server.admit({**headers, "X-Kvnode-Membership-Version": "9"})


@pytest.mark.parametrize(
    ("client", "meant", "reason"),
    [
        (ClusterAuth(b"another secret!!", CLUSTER, MEMBERS[0]), None, "wrong proof"),
        (
            ClusterAuth(SECRET.encode(), cluster_identity((*MEMBERS, "http://d:1")), MEMBERS[0]),
            None,
            "wrong proof",
        ),
        (ClusterAuth(SECRET.encode(), CLUSTER, MEMBERS[1]), None, "own URL"),
        (ClusterAuth(SECRET.encode(), CLUSTER, MEMBERS[0]), MEMBERS[2], "not this node"),
    ],
    ids=["wrong-secret", "other-cluster", "claims-the-server", "meant-another-node"],
)
def test_a_client_that_is_not_the_node_it_claims_is_refused(
    client: ClusterAuth, meant: str | None, reason: str
) -> None:
    server = ClusterAuth(SECRET.encode(), CLUSTER, MEMBERS[1])
    with pytest.raises(AuthError, match=reason):
        handshake(client, server, meant)


def test_a_server_without_the_secret_cannot_prove_itself() -> None:
    client = ClusterAuth(SECRET.encode(), CLUSTER, MEMBERS[0])
    impostor = ClusterAuth(b"not the secret!!", CLUSTER, MEMBERS[1])
    nonce = impostor.issue_nonce()
    headers, expected = client.upgrade_headers(MEMBERS[1], nonce)
    forged = impostor.answer_headers(headers, Introduction())[PROOF_HEADER]
    assert not server_proof_ok({PROOF_HEADER.lower(): forged}, expected)
    assert not server_proof_ok({}, expected)


def test_a_challenge_is_good_once_and_expires() -> None:
    clock = FakeClock()
    client = ClusterAuth(SECRET.encode(), CLUSTER, MEMBERS[0])
    server = ClusterAuth(SECRET.encode(), CLUSTER, MEMBERS[1], clock=clock)
    headers, _ = client.upgrade_headers(MEMBERS[1], server.issue_nonce())
    server.admit(headers)
    with pytest.raises(AuthError, match="challenge"):
        server.admit(headers)  # replayed
    headers, _ = client.upgrade_headers(MEMBERS[1], server.issue_nonce())
    clock.now += NONCE_TTL_S + 1
    with pytest.raises(AuthError, match="challenge"):
        server.admit(headers)


def test_outstanding_challenges_are_bounded() -> None:
    server = ClusterAuth(SECRET.encode(), CLUSTER, MEMBERS[1], clock=FakeClock())
    client = ClusterAuth(SECRET.encode(), CLUSTER, MEMBERS[0])
    first = server.issue_nonce()
    for _ in range(MAX_NONCES):
        server.issue_nonce()
    assert len(server._nonces) == MAX_NONCES
    with pytest.raises(AuthError, match="challenge"):
        server.admit(client.upgrade_headers(MEMBERS[1], first)[0])  # the oldest was forgotten


def test_the_secret_is_not_in_reprs() -> None:
    auth = ClusterAuth(SECRET.encode(), CLUSTER, MEMBERS[0])
    assert SECRET not in repr(auth)


NEW, PINNED = Versions(1, 2), Versions(1, 1)


def test_both_protocol_ranges_travel_and_a_range_changed_on_the_way_fails_the_servers_proof() -> None:
    client = ClusterAuth(SECRET.encode(), CLUSTER, MEMBERS[0])
    server = ClusterAuth(SECRET.encode(), CLUSTER, MEMBERS[1])
    headers, expected = client.upgrade_headers(MEMBERS[1], server.issue_nonce(), Introduction(protocols=NEW))
    _, theirs = server.admit(headers)
    assert theirs.protocols == NEW
    answer = server.answer_headers(headers, Introduction(SERVER_ID, protocols=PINNED))
    assert Introduction.of(answer).protocols == PINNED
    assert server_proof_ok(answer, expected)
    assert not server_proof_ok({**answer, "X-Kvnode-Protocols": "1-2"}, expected)  # talked up
    # The client's range taken out on the way: the server admits it (it could be an older node), and its
    # proof, made for a client that said none, fails the client's check: no end is talked down.
    headers, expected = client.upgrade_headers(MEMBERS[1], server.issue_nonce(), Introduction(protocols=NEW))
    stripped = {name: value for name, value in headers.items() if name != "X-Kvnode-Protocols"}
    assert server.admit(stripped)[1].protocols is None
    assert not server_proof_ok(server.answer_headers(stripped, Introduction(protocols=NEW)), expected)


def test_a_node_from_before_protocol_ranges_shakes_hands_with_a_newer_one_either_way() -> None:
    """An older kvnode says no range and proves itself as before; a newer one, client or server, accepts
    that proof and takes the older end for version 1 (kvnode.replica.channel.protocol.LEGACY)."""
    old = ClusterAuth(SECRET.encode(), CLUSTER, MEMBERS[0])
    new = ClusterAuth(SECRET.encode(), CLUSTER, MEMBERS[1])
    headers, expected = old.upgrade_headers(MEMBERS[1], new.issue_nonce(), Introduction(CLIENT_ID))
    assert "X-Kvnode-Protocols" not in headers
    assert new.admit(headers)[1].protocols is None
    assert server_proof_ok(new.answer_headers(headers, Introduction(SERVER_ID, protocols=NEW)), expected)
    headers, expected = new.upgrade_headers(MEMBERS[0], old.issue_nonce(), Introduction(protocols=NEW))
    old.admit(headers)
    answer = old.answer_headers(headers, Introduction(CLIENT_ID))
    assert "X-Kvnode-Protocols" not in answer
    assert server_proof_ok(answer, expected)


@pytest.mark.parametrize("text", ["", "2", "2-1", "0-1", "a-b", "1-2-3", "1-99999999"])
def test_anything_but_a_range_reads_as_no_range(text: str) -> None:
    assert Introduction.of({"x-kvnode-protocols": text}).protocols is None
