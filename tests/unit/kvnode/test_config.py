"""kvnode.config: node URLs, and what a node's config refuses."""

from __future__ import annotations

import pytest

from kvnode.config import NodeConfig, ReplicationFactor, node_url


def test_node_urls_put_ipv6_addresses_in_brackets() -> None:
    assert node_url("198.51.100.1", 8080) == "http://198.51.100.1:8080"
    assert node_url("::1", 8080) == "http://[::1]:8080"
    assert NodeConfig(host="::1", port=8080).url == "http://[::1]:8080"


def test_a_client_port_is_another_port_than_the_nodes_own() -> None:
    with pytest.raises(ValueError, match="--client-port"):
        NodeConfig(port=9000, client_port=9000)


# --- the replication factor, zones and datacenters -----------------------------------------------------


@pytest.mark.parametrize(
    ("text", "every", "by_datacenter", "shown"),
    [
        ("3", 3, (), "3"),
        ("0", 0, (), "0"),
        ("dc1:3", 0, (("dc1", 3),), "dc1:3"),
        (" west:2, east:3 ", 0, (("east", 3), ("west", 2)), "east:3,west:2"),
        ("east:3,west:0", 0, (("east", 3), ("west", 0)), "east:3,west:0"),
    ],
)
def test_a_replication_factor_is_one_n_or_one_a_datacenter_and_says_itself_as_the_flag_does(
    text: str, every: int, by_datacenter: tuple[tuple[str, int], ...], shown: str
) -> None:
    factor = ReplicationFactor.parse(text)
    assert (factor.every, factor.by_datacenter, str(factor)) == (every, by_datacenter, shown)
    assert ReplicationFactor.from_json(factor.to_json()) == factor
    assert bool(factor) == (text.strip() != "0")


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("three", "N or DC:N"),
        ("-1", "N or DC:N"),
        ("dc1:x", "N or DC:N"),
        ("dc1:3,dc1:2", "names datacenter dc1 twice"),
        (":3", "a datacenter name"),
        ("dc 1:3", "a datacenter name"),
        ("dc1:0", "at least one copy"),
    ],
)
def test_a_replication_factor_that_is_neither_is_refused_in_one_line(text: str, reason: str) -> None:
    with pytest.raises(ValueError, match=reason) as refused:
        ReplicationFactor.parse(text)
    assert "\n" not in str(refused.value)


def test_a_factor_fits_the_members_of_each_datacenter_it_names_and_names_each_one() -> None:
    members = {"east": 3, "west": 2}
    ReplicationFactor.parse("east:3,west:2").check(members)
    ReplicationFactor(2).check(members)
    for text, reason in (
        ("3", "N=3 exceeds the 2 members of datacenter west"),
        ("east:3", "leaves out west"),
        ("east:3,west:1,north:1", "names north, which has no members"),
    ):
        with pytest.raises(ValueError, match=reason):
            ReplicationFactor.parse(text).check(members)
    assert ReplicationFactor.default_for({"east": 3, "west": 3}) == ReplicationFactor(3)
    assert str(ReplicationFactor.default_for({"east": 3, "west": 2})) == "east:3,west:2"
    with pytest.raises(ValueError, match="not a replication factor"):
        ReplicationFactor.from_json("3")


MEMBERS = ("http://127.0.0.1:9000", "http://127.0.0.1:9001", "http://127.0.0.1:9002")


@pytest.mark.parametrize(
    ("options", "refusal"),
    [
        ({"cluster": MEMBERS, "zones": ("a", "b")}, "--zones names 2, and --cluster has 3 members"),
        ({"cluster": MEMBERS, "datacenters": ("x",) * 4}, "--datacenters names 4, and --cluster has 3"),
        ({"cluster": MEMBERS, "zones": ("a", "b", "c d")}, "a zone name is"),
        ({"zone": "a"}, "--zone is for a node joining"),
        ({"join": MEMBERS[1], "zone": "a", "replace": MEMBERS[2]}, "takes its zone and datacenter"),
        ({"join": MEMBERS[1], "datacenters": ("x",)}, "a node joining takes --zone and --datacenter"),
        (
            {"cluster": MEMBERS, "replication_factor": ReplicationFactor(4)},
            "--replication-factor 4: N=4 exceeds the 3 members",
        ),
        (
            {
                "cluster": MEMBERS,
                "datacenters": ("east", "east", "west"),
                "replication_factor": ReplicationFactor.parse("east:2,weest:1"),
            },
            "names weest, which has no members, and leaves out west",
        ),
    ],
)
def test_zones_datacenters_and_a_factor_that_cannot_be_are_refused(
    options: dict[str, object], refusal: str
) -> None:
    with pytest.raises(ValueError, match=refusal):
        NodeConfig(port=9000, **options)  # type: ignore[arg-type]
