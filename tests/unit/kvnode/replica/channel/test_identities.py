"""kvnode.replica.channel.identities with a real system database: what a node says of itself in a handshake
(the protocol versions it speaks among it), what it remembers of a peer, and the one line it logs when a
member comes back as another node."""

from __future__ import annotations

import logging

import pytest

from kvnode.replica.channel.handshake import Introduction
from kvnode.replica.channel.identities import Identities
from kvnode.replica.channel.protocol import Versions, spoken
from kvnode.storage.system_db import SystemDb
from kvnode.topology.membership import Membership

MEMBERS = ("http://a:1", "http://b:1", "http://c:1")
B_OLD, B_NEW = "0b" * 16, "1b" * 16
SPEAKS = spoken()


def identities_of_a(
    system_db: SystemDb, heard: list[tuple[str, Introduction]], protocols: Versions | None = None
) -> Identities:
    return Identities(
        MEMBERS[0],
        Membership.seeded(MEMBERS),
        system_db.identity,
        system_db.peer_identities,
        lambda peer, introduction: heard.append((peer, introduction)),
        protocols,
    )


def test_a_node_introduces_itself_with_what_it_remembered_of_the_peer(system_db: SystemDb) -> None:
    identities = identities_of_a(system_db, [])
    own = system_db.identity.value
    assert identities.introduce(MEMBERS[1]) == Introduction(own, "", membership=1, protocols=SPEAKS)
    identities.met(MEMBERS[1], Introduction(B_OLD))
    assert identities.introduce(MEMBERS[1]) == Introduction(own, B_OLD, membership=1, protocols=SPEAKS)
    identities.met(MEMBERS[1], Introduction(B_NEW))
    assert identities.introduce(MEMBERS[1]) == Introduction(own, B_NEW, B_OLD, 1, SPEAKS)
    assert identities.introduce(MEMBERS[2]) == Introduction(own, membership=1, protocols=SPEAKS)


def test_a_node_pinned_to_an_older_protocol_says_so(system_db: SystemDb) -> None:
    identities = identities_of_a(system_db, [], spoken(1))
    assert identities.introduce(MEMBERS[1]).protocols == Versions(1, 1)


def test_a_member_back_as_another_node_is_remembered_anew_with_one_line(
    system_db: SystemDb, caplog: pytest.LogCaptureFixture
) -> None:
    heard: list[tuple[str, Introduction]] = []
    identities = identities_of_a(system_db, heard)
    identities.met(MEMBERS[1], Introduction(B_OLD))
    with caplog.at_level(logging.WARNING, logger="kvnode.replica.channel.identities"):
        identities.met(MEMBERS[1], Introduction(B_NEW))
        identities.met(MEMBERS[1], Introduction(B_NEW, system_db.identity.value))
    assert [record.getMessage() for record in caplog.records] == [
        f"member {MEMBERS[1]} came back as another node (identity {B_NEW}, was {B_OLD}): its data was "
        "lost, it rebuilds from its peers"
    ]
    assert system_db.peer_identities.get(MEMBERS[1]) == (B_NEW, B_OLD)
    assert [introduction.remembered for _, introduction in heard] == ["", "", system_db.identity.value]


def test_only_other_members_are_remembered(system_db: SystemDb) -> None:
    """Without a secret anyone may open a channel, and say anything of itself."""
    heard: list[tuple[str, Introduction]] = []
    identities = identities_of_a(system_db, heard)
    identities.met("http://d:1", Introduction(B_OLD))
    identities.met(MEMBERS[0], Introduction(B_OLD))
    identities.met("", Introduction(B_OLD))
    assert heard == []
    assert system_db.peer_identities.get("http://d:1") == ("", "")
