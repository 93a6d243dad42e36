"""loadtest.wan_figures: the shapes' datacenters (the percentiles are its doctest)."""

from __future__ import annotations

from loadtest.wan_figures import SHAPES


def test_the_two_datacenter_cluster_names_each_members_datacenter_and_the_one_datacenter_cluster_none() -> (
    None
):
    single, double = SHAPES
    assert single.datacenters == ()
    assert double.datacenters == ("dc1",) * 3 + ("dc2",) * 3
