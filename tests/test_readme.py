"""The README's tour runs as written: its shell and Python examples, in order, against a live 3-node
cluster, each answering what its comment says; so does docs/security.md's local cluster with all three
guards, against its own cluster.

The examples name ports 8080-8082 (``make run``'s cluster); only those are rewritten, to the test
cluster's. A comment states a checkable claim when it starts with one of:

    # 201 Created ...        the HTTP status in curl -i's output (", body: TEXT" also checks the body)
    # prints: TEXT           the command's whole output
    # JSON ...               the output parses as JSON

A ``text`` block right after a shell block shows its last command's output: its status line, every
header line it lists, and its body must match. A Python block ending in ``# prints:`` and comment lines
must print those lines. Other comments are explanations.
"""

from __future__ import annotations

import json
import re
import selectors
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from kvnode.ops.ports import free_ports
from kvnode.topology.placement import Placement
from tests.harness import ClusterFactory, clean_env, stats, wait_for

README = Path(__file__).parent.parent / "README.md"
# The sections whose examples run, in order: the tour, then operating a cluster (metrics and admin).
SECTIONS = ("## A short tour", "## Operating a cluster")
README_PORTS = {"8080": 0, "8081": 1, "8082": 2}  # the README's node -> index in the test cluster
# Its own cluster (TLS and tokens), started as docs/security.md starts it, on ports 8443-8445 rewritten.
SECURITY_DOC = README.parent / "docs" / "security.md"
SECURITY = "## A local cluster with all three guards"
SECURE_DIR = "~/.kvnode/secure"  # where it keeps its files, outside the repository; the test's tmp_path


@dataclass
class Block:
    language: str
    text: str
    shown_output: str | None = None  # the ``text`` block that follows a shell block


def tour_blocks(markdown: str, headings: tuple[str, ...] = SECTIONS) -> list[Block]:
    sections = []
    for heading in headings:
        start = markdown.index(heading)
        end = markdown.find("\n## ", start + len(heading))  # -1: the section runs to the end of the file
        sections.append(markdown[start : end if end >= 0 else len(markdown)])
    blocks: list[Block] = []
    for language, text in re.findall(r"^```(\w+)\n(.*?)^```$", "\n".join(sections), re.M | re.S):
        if language == "text" and blocks and blocks[-1].language == "sh":
            blocks[-1].shown_output = text
        else:
            blocks.append(Block(language, text))
    return blocks


def split_comment(line: str) -> tuple[str, str]:
    """The command and its comment: the comment starts at the first `` # `` (the examples quote no #)."""
    command, _, comment = line.partition(" # ")
    return command.strip(), comment.strip()


def logical_lines(text: str) -> list[str]:
    return [line for line in re.sub(r"\\\n\s*", " ", text).splitlines() if line.strip()]


def runnable(block: Block) -> bool:
    """Shell blocks with a curl example run against the cluster (the block that starts servers does not);
    Python blocks run too."""
    if block.language == "python":
        return True
    return block.language == "sh" and any(line.startswith("curl ") for line in logical_lines(block.text))


def rewrite_ports(text: str, urls: list[str]) -> str:
    return re.sub(r"http://127\.0\.0\.1:(808[0-2])\b", lambda found: urls[README_PORTS[found.group(1)]], text)


@dataclass
class Reply:
    status_line: str
    headers: list[str]
    body: bytes


def parse_curl_i(output: bytes) -> Reply:
    head, _, body = output.partition(b"\r\n\r\n")
    status_line, *headers = head.decode("latin-1").split("\r\n")
    return Reply(status_line, headers, body)


def check_claim(command: str, comment: str, output: bytes) -> None:
    where = f"example `{command}` (# {comment})"
    status = re.match(r"(\d{3})\b", comment)
    if status:
        assert command.startswith("curl -i"), f"{where}: claims a status, but only curl -i shows one"
        reply = parse_curl_i(output)
        assert reply.status_line.split()[1] == status.group(1), f"{where}: answered {reply.status_line!r}"
        body = re.search(r"\bbody: (.+)$", comment)
        if body:
            assert reply.body.decode() == body.group(1), f"{where}: body {reply.body[:200]!r}"
    elif comment.startswith("prints: "):
        assert output.decode().strip() == comment.removeprefix("prints: "), f"{where}: printed {output!r}"
    elif comment.startswith("JSON"):
        json.loads(output)


def check_shown_output(shown: str, output: bytes) -> None:
    """The output block as the README shows it: status line, the headers listed, then the body."""
    shown_head, _, shown_body = shown.partition("\n\n")
    reply = parse_curl_i(output)
    status_line, *headers = shown_head.splitlines()
    assert reply.status_line == status_line
    for header in headers:
        assert header == "..." or header in reply.headers, f"{header!r} not in {reply.headers}"
    assert reply.body.decode().replace("\r\n", "\n").strip() == shown_body.strip()


def curl_examples(markdown: str) -> list[str]:
    """Every curl command in a fenced block of ``markdown``."""
    return [
        line
        for text in re.findall(r"^```\w*\n(.*?)^```$", markdown, re.M | re.S)
        for line in logical_lines(text)
        if line.lstrip().startswith("curl ")
    ]


def test_every_curl_example_is_in_a_block_the_tour_test_runs() -> None:
    markdown = README.read_text()
    run = [line for block in tour_blocks(markdown) if runnable(block) for line in logical_lines(block.text)]
    assert curl_examples(markdown), "the README has curl examples"
    assert [line for line in curl_examples(markdown) if line not in run] == []
    # docs/security.md's are run by the security test.
    security = SECURITY_DOC.read_text()
    run = [line for block in tour_blocks(security, (SECURITY,)) for line in logical_lines(block.text)]
    assert curl_examples(security), "docs/security.md has curl examples"
    assert [line for line in curl_examples(security) if line not in run] == []


def test_tour_blocks_reads_a_section_to_the_end_of_the_file() -> None:
    markdown = "# t\n\n## A\n\n```sh\ncurl a\n```\n\n## B\n\n```sh\ncurl b\n```\n"
    assert [block.text for block in tour_blocks(markdown, ("## A",))] == ["curl a\n"]
    assert [block.text for block in tour_blocks(markdown, ("## B",))] == ["curl b\n"]


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed (apt-get install curl)")
def test_tour_runs_as_written(start_cluster: ClusterFactory, tmp_path: Path) -> None:
    urls = start_cluster(3).urls
    blocks = [block for block in tour_blocks(README.read_text()) if runnable(block)]
    assert [block.language for block in blocks].count("sh") >= 2
    checked = 0
    for block in blocks:
        if block.language == "python":
            run_python(block.text, urls, tmp_path)
            continue
        output = b""
        for line in logical_lines(block.text):
            command, comment = split_comment(line)
            finished = subprocess.run(
                ["bash", "-c", rewrite_ports(command, urls)], cwd=tmp_path, capture_output=True, timeout=30
            )
            assert finished.returncode == 0, f"`{command}` exited {finished.returncode}: {finished.stderr!r}"
            # curl warns and goes on, e.g. with an empty body for a missing @file.
            assert b"Warning" not in finished.stderr, f"`{command}`: {finished.stderr.decode()}"
            output = finished.stdout
            check_claim(command, comment, output)
            checked += bool(comment)
        if block.shown_output is not None:
            check_shown_output(block.shown_output, output)
    assert checked >= 15


ADMIN = ".venv/bin/python -m kvnode admin "


def admin_examples(markdown: str) -> list[Block]:
    """The tour's ``kvnode admin`` examples, each a shell block of one command with its output after it."""
    blocks = [block for block in tour_blocks(markdown) if block.text.startswith(ADMIN)]
    assert all(block.shown_output for block in blocks), "every admin example shows its output"
    return blocks


def normalised(output: str, readme_urls: dict[str, str]) -> list[str]:
    """Lines as the README shows them: the test cluster's URLs as the README's, one space between cells,
    and a down time as N.Ns (it depends on when the command ran)."""
    for test_url, readme_url in readme_urls.items():
        output = output.replace(test_url, readme_url)
    return [re.sub(r"\b\d+\.\ds\b", "N.Ns", " ".join(line.split())) for line in output.strip().splitlines()]


def test_admin_examples_print_what_the_readme_shows(start_cluster: ClusterFactory) -> None:
    cluster = start_cluster(3)
    readme_urls = [f"http://127.0.0.1:{port}" for port in README_PORTS]
    as_readme = dict(zip(cluster.urls, readme_urls, strict=True))
    assert cluster[0].put("warm", b"v", ack=3).status == 201
    cluster[2].stop()  # the README's scene: the third node stopped, three writes since
    for index in range(3):
        assert cluster[0].put(f"admin-example-{index}", b"v").status == 201
    stopped = cluster[2].url
    wait_for(lambda: stats(cluster[0])["hints"]["pending"].get(stopped) == 3, what="the three writes' hints")
    blocks = admin_examples(README.read_text())
    assert {block.text.split()[-1] for block in blocks} >= {"status", "user:42"}
    for block in blocks:
        command = block.text.strip()
        finished = subprocess.run(
            ["bash", "-c", rewrite_ports(command, cluster.urls).replace(".venv/bin/python", sys.executable)],
            capture_output=True, text=True, timeout=30,
        )  # fmt: skip
        assert finished.returncode == 0, finished.stderr
        printed, shown = normalised(finished.stdout, as_readme), normalised(block.shown_output or "", {})
        if " locate " not in command:
            assert printed == shown, command
            continue
        # A key's order depends on the members' URLs: the README's is placement's for its own URLs, and
        # the live tables (the replicas, then their Paxos state) hold the same rows in their own order.
        key = command.split()[-1]
        paxos = next(index for index, line in enumerate(shown) if line.startswith("Paxos state"))
        shown_order = [line.split()[1] for line in shown[2:paxos]]
        assert shown_order == Placement(readme_urls).order(key.encode()), "the README's order is placement's"
        assert printed[:2] == shown[:2] and printed[paxos : paxos + 2] == shown[paxos : paxos + 2], command
        assert sorted(line.split(" ", 1)[1] for line in printed[2:paxos]) == sorted(
            line.split(" ", 1)[1] for line in shown[2:paxos]
        ), command
        owners = slice(paxos + 2, paxos + 2 + len(shown_order))
        assert sorted(printed[owners]) == sorted(shown[owners]), command
        assert printed[owners.stop :] == shown[owners.stop :], command  # why an owner did not answer


def run_python(source: str, urls: list[str], cwd: Path, rewrite: Callable[[str], str] | None = None) -> None:
    expected = source.partition("# prints:\n")[2]
    assert expected, "a Python example ends with what it prints"
    python = [sys.executable, "-c", rewrite(source) if rewrite else rewrite_ports(source, urls)]
    finished = subprocess.run(python, cwd=cwd, capture_output=True, text=True, timeout=30)
    assert finished.returncode == 0, finished.stderr
    assert finished.stdout.splitlines() == [line.removeprefix("# ") for line in expected.splitlines()]


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("curl -i 'http://127.0.0.1:8080/x'   # 200 OK", ("curl -i 'http://127.0.0.1:8080/x'", "200 OK")),
        ("head -c 10 /dev/urandom > f", ("head -c 10 /dev/urandom > f", "")),
    ],
)
def test_split_comment(line: str, expected: tuple[str, str]) -> None:
    assert split_comment(line) == expected


def wait_until_ready(cluster: subprocess.Popen[str], seconds: float = 60) -> None:
    """Read the cluster command's output until it says it is ready; fail if it exits or takes too long."""
    assert cluster.stdout is not None
    selector = selectors.DefaultSelector()
    selector.register(cluster.stdout, selectors.EVENT_READ)
    deadline = time.monotonic() + seconds
    said: list[str] = []
    while time.monotonic() < deadline:
        if selector.select(timeout=0.5):
            line = cluster.stdout.readline()
            assert line, f"the cluster exited: {''.join(said)}"
            said.append(line)
            if " ready " in line:
                return
    raise AssertionError(f"the cluster was not ready in time: {''.join(said)}")


@pytest.mark.skipif(
    shutil.which("curl") is None or shutil.which("openssl") is None, reason="needs curl, openssl"
)
def test_security_section_runs_as_written(tmp_path: Path) -> None:
    setup, commands, python = tour_blocks(SECURITY_DOC.read_text(), (SECURITY,))
    base = free_ports(3)[0]  # consecutive, below the ephemeral range our own connections take ports from

    def rewrite(text: str) -> str:
        text = re.sub(r"\b844([3-5])\b", lambda found: str(base + int(found.group(1)) - 3), text)
        text = text.replace(".venv/bin/python", sys.executable).replace(SECURE_DIR, str(tmp_path))
        assert "~" not in text, f"an example writes to the home directory: {text}"
        return text

    *preparing, start = logical_lines(setup.text)
    for line in preparing:
        subprocess.run(["bash", "-c", rewrite(line)], cwd=tmp_path, check=True, timeout=30)
    cluster = subprocess.Popen(
        ["bash", "-c", "exec " + rewrite(start)], cwd=tmp_path, env=clean_env(),
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        wait_until_ready(cluster)
        for line in logical_lines(commands.text):
            command, comment = split_comment(line)
            finished = subprocess.run(
                ["bash", "-c", rewrite(command)], cwd=tmp_path, capture_output=True, timeout=30
            )
            assert finished.returncode == 0, f"`{command}` exited {finished.returncode}: {finished.stderr!r}"
            check_claim(command, comment, finished.stdout)
        run_python(python.text, [], tmp_path, rewrite)
    finally:
        cluster.terminate()
        cluster.wait(timeout=60)
