from tests.conftest import ClusterFactory


def test_three_node_roundtrip(start_cluster: ClusterFactory) -> None:
    cluster = start_cluster(3)
    assert cluster[0].put("k", b"v").status == 201
    assert cluster[1].get("k").body == b"v"
    assert cluster[2].delete("k").status == 202
    assert cluster[0].get("k").status == 404
    cluster[0].put("a", b"x\ny", from_=3, ack=3)
    assert cluster[1].scan("a") == [(b"a", b"x\ny")]
