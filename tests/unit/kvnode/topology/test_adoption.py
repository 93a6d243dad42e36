"""kvnode.topology.adoption: what taking a newer membership takes, for each change a node may be offered
(the channels opened and closed, a joiner told, a join undone named), and the memberships it refuses (pure;
tests/unit/kvnode/cluster/test_members.py carries it out in-process)."""

from __future__ import annotations

import dataclasses

import pytest

from kvnode.topology.adoption import Adoption, NotAdopted, adoption
from kvnode.topology.membership import Membership

A, B, C, D = "http://a:1", "http://b:1", "http://c:1", "http://d:1"
SEEDED = Membership.seeded([A, B, C])


def test_a_member_joining_is_a_channel_opened_and_one_that_settles_changes_no_channel() -> None:
    joining = SEEDED.with_joining(D)
    assert adoption(SEEDED, joining, A) == Adoption(joining, member=True, opened=(D,))
    assert adoption(joining, joining.settled(D), A) == Adoption(joining.settled(D), member=True)


def test_a_member_removed_is_a_channel_closed_and_it_takes_no_further_part() -> None:
    leaving = SEEDED.with_leaving(C)
    assert adoption(SEEDED, leaving, A) == Adoption(leaving, member=True)
    removed = leaving.removed(C)
    assert adoption(leaving, removed, A) == Adoption(removed, member=True, closed=(C,))
    assert adoption(leaving, removed, C) == Adoption(removed, member=False)  # it left: stored, no more


def test_a_join_undone_closes_the_joiners_channel_telling_it_first_and_names_it() -> None:
    joining = SEEDED.with_joining(D)
    undone = joining.undone(D)
    seen = adoption(joining, undone, B)
    assert (seen.closed, seen.told) == ((D,), (D,))
    assert seen.undone == f"join of {D} undone (membership version 3)"
    made = adoption(joining, undone, A, why="removed by the operator")  # on the member that made it
    assert made.undone == f"join of {D} undone: removed by the operator (membership version 3)"
    assert adoption(joining, undone, D) == Adoption(undone, member=False)  # the joiner, told


def test_a_replacement_closes_the_members_channel_and_opens_the_newcomers() -> None:
    replaced = SEEDED.replaced(C, D)
    assert adoption(SEEDED, replaced, A) == Adoption(replaced, member=True, opened=(D,), closed=(C,))


def test_a_foreign_an_older_or_the_same_version_and_one_that_leaves_out_a_member_are_refused() -> None:
    leaving = SEEDED.with_leaving(C)
    with pytest.raises(NotAdopted, match="another cluster's membership"):
        adoption(SEEDED, dataclasses.replace(leaving, cluster="another"), A)
    for offered in (SEEDED, Membership.seeded([A, B, C])):
        with pytest.raises(NotAdopted, match="version 1 is not newer than this node's 1"):
            adoption(SEEDED, offered, A)
    with pytest.raises(NotAdopted, match=f"this node \\({A}\\) is not a member of version 3: it was removed"):
        adoption(SEEDED, SEEDED.with_leaving(A).removed(A), A)
    with pytest.raises(NotAdopted, match="it was removed or replaced"):
        adoption(SEEDED, SEEDED.replaced(A, D), A)
