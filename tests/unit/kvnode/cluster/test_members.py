"""kvnode.cluster.members in-process: the membership a node runs with, a newer one adopted (stored first,
then run with), an older or foreign one refused, one without this node only stored, a member removed let
go of, and a handshake that says another version leading to a fetch or an offer; the peers are other
in-process nodes (what adopting takes, alone: tests/unit/kvnode/topology/test_adoption.py; real nodes:
tests/cluster/test_join.py and test_leave.py)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from kvnode.cluster.members import Members, NotAdopted
from kvnode.replica.peer import PeerReplica
from kvnode.topology.epoch import Epoch
from tests.drivers import InProcessNode, in_process_nodes, until


class Told:
    """A part that depends on the membership: the versions of the epochs it was handed."""

    def __init__(self) -> None:
        self.versions: list[int] = []

    def use(self, epoch: Epoch[PeerReplica]) -> None:
        self.versions.append(epoch.membership.version)


def told_members(node: InProcessNode) -> tuple[Members, Told]:
    """The node's Members, started with one part told of every epoch."""
    members, told = node.open_members(), Told()
    members.start([told])
    return members, told


async def test_a_newer_membership_is_stored_then_run_with_and_every_part_told(tmp_path: Path) -> None:
    async with in_process_nodes(tmp_path, 3) as (one, _two, three):
        members, told = told_members(one)
        leaving = members.membership.with_leaving(three.url)
        members.adopt(leaving)
        assert members.membership == leaving and told.versions == [1, 2]
        assert one.system.membership.load() == leaving  # a restart runs with it
        assert members.placement.nodes == leaving.placement().nodes


async def test_an_older_a_foreign_or_an_excluding_membership_is_refused(tmp_path: Path) -> None:
    async with in_process_nodes(tmp_path, 3) as (one, _two, three):
        members = one.open_members()
        current = members.membership
        with pytest.raises(NotAdopted, match="not newer"):
            members.adopt(current)
        with pytest.raises(NotAdopted, match="another cluster"):
            members.adopt(dataclasses.replace(current.with_leaving(three.url), cluster="another"))
        without_one = current.with_leaving(one.url).removed(one.url)
        with pytest.raises(NotAdopted, match="not a member"):
            members.adopt(without_one)
        assert members.membership == current


async def test_a_handshake_naming_a_newer_version_fetches_and_adopts_it(tmp_path: Path) -> None:
    async with in_process_nodes(tmp_path, 3) as (one, two, three):
        behind, ahead = one.open_members(), two.open_members()
        ahead.adopt(ahead.membership.with_leaving(three.url))
        behind.heard_version(two.url, ahead.membership.version)
        await until(lambda: behind.membership.version == 2, "the newer version adopted")


async def test_a_handshake_naming_an_older_version_offers_this_nodes(tmp_path: Path) -> None:
    async with in_process_nodes(tmp_path, 3) as (one, two, three):
        ahead, behind = one.open_members(), two.open_members()
        ahead.adopt(ahead.membership.with_leaving(three.url))
        ahead.heard_version(two.url, 1)
        await until(lambda: behind.membership.version == 2, "the peer took the newer version")


async def test_the_barrier_returns_once_every_peer_runs_with_the_version(tmp_path: Path) -> None:
    async with in_process_nodes(tmp_path, 3) as nodes:
        all_members: list[Members] = [node.open_members() for node in nodes]
        first = all_members[0]
        plan = first.membership.with_leaving(nodes[2].url)
        first.adopt(plan)
        all_members[1].adopt(plan)
        all_members[2].adopt(plan)
        await first.peers_at(plan.version)  # each probe is a handshake that says the peer's version


async def test_a_version_without_this_node_is_stored_and_the_epoch_stays_as_it_was(tmp_path: Path) -> None:
    async with in_process_nodes(tmp_path, 3) as (_one, _two, three):
        members, told = told_members(three)
        leaving = members.membership.with_leaving(three.url)
        members.adopt(leaving)
        members.adopt(leaving.removed(three.url))
        assert members.without_this_node == leaving.removed(three.url)
        assert three.system.membership.load() == leaving.removed(three.url)  # a restart is refused
        assert three.system.membership.left() == three.url  # ... saying that it left
        assert members.membership == leaving and told.versions == [1, 2]  # it answers as it did


async def test_a_member_removed_is_let_go_of_and_a_join_undone_is_named(tmp_path: Path) -> None:
    async with in_process_nodes(tmp_path, 4, members=3) as (one, two, three, four):
        members = one.open_members()
        joining = members.membership.with_joining(four.url)
        members.adopt(joining)
        assert [peer.url for peer in members.peers] == [two.url, three.url, four.url]
        members.adopt(joining.undone(four.url), why="removed by the operator")
        assert [peer.url for peer in members.peers] == [two.url, three.url]
        assert members.undone == f"join of {four.url} undone: removed by the operator (membership version 3)"
