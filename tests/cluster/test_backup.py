"""``admin backup`` and ``admin restore`` on real node processes: a backup taken under writes restores
into a fresh cluster whole (values and tombstones, their timestamps kept); restored into its own cluster
it keeps every write and delete made since; an old version whose key tombstone GC dropped is skipped
unless ``--authoritative``; a member down fails a backup and a restore; a corrupt or truncated backup,
and a body that is not frames, are refused with one line."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

from tests.changes import Writer, assert_readable, fill, status_of
from tests.harness import ClusterFactory, Node, assert_exit_2_with_one_line, request, run_kvnode, wait_for
from tests.healing import GC, past_grace, repair_all, versions_of


def admin(node: Node, *args: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    return run_kvnode(["admin", "--url", node.url, *map(str, args)], cwd)


def test_a_backup_taken_under_writes_restores_into_a_fresh_cluster(
    start_cluster: ClusterFactory, tmp_path: Path
) -> None:
    source = start_cluster(3)
    everywhere, two = fill(source)
    deleted, kept = everywhere[:20], everywhere[20:]
    for key in deleted:
        assert source[0].delete(key, ack=3).status == 202
    with Writer(source[1], "during") as writer:
        wait_for(lambda: len(writer.acknowledged) >= 20, what="the writer under way")
        before = list(writer.acknowledged)  # acknowledged before the backup started: in it
        backup = admin(source[0], "backup", tmp_path / "backup", cwd=tmp_path)
    assert backup.returncode == 0, backup.stderr
    manifest = json.loads((tmp_path / "backup" / "manifest.json").read_text())
    assert manifest["cluster_id"] == status_of(source[0])["cluster_id"]
    assert manifest["members"] == [node.url for node in source]
    counts = manifest["counts"]
    assert counts["tombstones"] == len(deleted)
    assert counts["values"] >= len(kept) + len(two) + len(before)
    assert f"{counts['keys']} keys ({counts['values']} values, {len(deleted)} tombstones" in backup.stdout

    target = start_cluster(3)
    restore = admin(target[0], "restore", tmp_path / "backup", cwd=tmp_path)
    assert restore.returncode == 0, restore.stderr
    assert f"restored {counts['keys']} versions, 0 kept a newer version" in restore.stdout
    assert_readable(list(target), kept + before, two)
    assert [key for key in deleted if target[0].get(key).status != 404] == []
    source_versions, target_versions = versions_of(source[0]), versions_of(target[0])
    assert all(target_versions[key].tombstone for key in deleted)  # every tombstone restored, to hide
    assert [target_versions[key] for key in kept] == [source_versions[key] for key in kept]  # timestamps kept


def test_a_restore_into_its_own_cluster_keeps_every_write_and_delete_made_since(
    start_cluster: ClusterFactory, tmp_path: Path
) -> None:
    cluster = start_cluster(3)
    everywhere, two = fill(cluster)
    backup = admin(cluster[0], "backup", tmp_path / "backup", cwd=tmp_path)
    assert backup.returncode == 0, backup.stderr
    changed, gone, unchanged = everywhere[:30], everywhere[30:60], everywhere[60:]
    gone_two, two_unchanged = two[:20], two[20:]
    for key in changed:
        assert cluster[1].put(key, b"changed since", ack=3).status == 201
    for key in gone:
        assert cluster[1].delete(key, ack=3).status == 202
    for key in gone_two:
        assert cluster[1].delete(key, ack=2, from_=2).status == 202
    added = [f"added-{i}" for i in range(20)]
    for key in added:
        assert cluster[1].put(key, key.encode(), ack=3).status == 201

    restore = admin(cluster[2], "restore", tmp_path / "backup", cwd=tmp_path)
    assert restore.returncode == 0, restore.stderr
    newer = len(changed) + len(gone) + len(gone_two)
    restored = len(everywhere) + len(two) - newer
    assert f"restored {restored} versions, {newer} kept a newer version in the cluster" in restore.stdout
    for node in cluster:
        assert [key for key in changed if node.get(key).body != b"changed since"] == [], node.url
        assert [key for key in gone if node.get(key).status != 404] == [], node.url
        assert [key for key in gone_two if node.get(key, ack=2, from_=2).status != 404] == [], node.url
    assert_readable(list(cluster), unchanged + added, two_unchanged)

    cluster[2].stop()
    incomplete = admin(cluster[0], "backup", tmp_path / "incomplete", cwd=tmp_path)
    assert incomplete.returncode == 1
    assert cluster[2].url in incomplete.stderr and incomplete.stderr.count("\n") == 1, incomplete.stderr
    assert not (tmp_path / "incomplete" / "manifest.json").exists()
    refused = admin(cluster[0], "restore", tmp_path / "backup", cwd=tmp_path)
    assert refused.returncode == 1
    unreachable = f"cannot restore while members are unreachable from {cluster[0].url}: {cluster[2].url}\n"
    assert refused.stderr.endswith(unreachable) and refused.stderr.count("\n") == 1, refused.stderr


def test_an_old_version_whose_key_was_collected_is_skipped_unless_the_restore_is_authoritative(
    start_cluster: ClusterFactory, tmp_path: Path
) -> None:
    cluster = start_cluster(3, **GC)
    gone, still = [f"gone-{i}" for i in range(10)], [f"still-{i}" for i in range(10)]
    for key in gone + still:
        assert cluster[0].put(key, key.encode(), ack=3).status == 201
    backup = admin(cluster[0], "backup", tmp_path / "backup", cwd=tmp_path)
    assert backup.returncode == 0, backup.stderr
    for key in gone:
        assert cluster[0].delete(key, ack=3).status == 202
    past_grace(list(cluster), len(gone))
    repair_all(list(cluster), tmp_path)
    # Until no node holds them: a node that had not dropped them yet could send them back in a repair.
    wait_for(
        lambda: all(not set(gone) & set(versions_of(node)) for node in cluster),
        what="the tombstones dropped on every node",
    )

    restore = admin(cluster[0], "restore", tmp_path / "backup", cwd=tmp_path)
    assert restore.returncode == 0, restore.stderr
    assert f"restored {len(still)} versions, 0 kept a newer version in the cluster, {len(gone)} skipped" in (
        restore.stdout
    )
    assert "--authoritative restores them" in restore.stdout
    assert [key for key in gone if cluster[1].get(key, ack=3).status != 404] == []
    assert_readable(list(cluster), still)

    authoritative = admin(cluster[0], "restore", tmp_path / "backup", "--authoritative", cwd=tmp_path)
    assert authoritative.returncode == 0, authoritative.stderr
    assert f"restored {len(gone) + len(still)} versions" in authoritative.stdout
    assert_readable(list(cluster), gone + still)


def test_a_corrupt_or_truncated_backup_is_refused_with_one_line(
    start_cluster: ClusterFactory, tmp_path: Path
) -> None:
    [node] = start_cluster(1)
    for i in range(50):
        assert node.put(f"key-{i}", b"value %d" % i).status == 201
    good = tmp_path / "good"
    assert admin(node, "backup", good, cwd=tmp_path).returncode == 0
    again = admin(node, "backup", good, cwd=tmp_path)
    assert "holds a backup already" in assert_exit_2_with_one_line(again)

    corrupt, truncated, unfinished = (shutil.copytree(good, tmp_path / name) for name in ("c", "t", "u"))
    data = bytearray((corrupt / "versions").read_bytes())
    data[len(data) // 2] ^= 0xFF
    (corrupt / "versions").write_bytes(bytes(data))
    (truncated / "versions").write_bytes(data[: len(data) // 2])
    (unfinished / "manifest.json").unlink()
    for backup, reason in ((corrupt, "sha256"), (truncated, "truncated"), (unfinished, "no manifest.json")):
        refused = admin(node, "restore", backup, cwd=tmp_path)
        assert reason in assert_exit_2_with_one_line(refused), refused.stderr

    assert list(versions_of(node, start="key-10", end="key-12")) == ["key-10", "key-11"]
    assert list(versions_of(node, start="key-8")) == ["key-8", "key-9"]
    unknown = request(node.url, "GET", "/v0/versions", {"from": "key-1"})
    assert unknown.status == 400 and "unknown query parameter 'from'" in unknown.text
    garbage = request(node.url, "POST", "/v0/versions", body=b"\x00\x00\x00\x05\x00\x00\x00\x01abc")
    assert garbage.status == 400 and garbage.text.count("\n") == 1, garbage.text
    assert "cut short" in garbage.text
    wrong = request(node.url, "POST", "/v0/versions", {"check": "everything"}, body=b"")
    assert wrong.status == 400 and "'check' takes only 'live'" in wrong.text
