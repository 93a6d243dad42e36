"""A node's application (kvnode.node.app) served in this process: a method a path does not take is a 405
naming the ones it does, an unknown path a 404, both in one line and writing nothing; the client token
check, only with a tokens file (401 without a valid token, its line telling a missing token from an
unknown one, as kvnode.client reports it; 403 beyond its role, open paths untouched); the hot routes called
directly, their tokens checked by the gate alike (a reloaded file too), and through the router alike."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvnode.access.client_auth import unauthorized_reason
from kvnode.access.connections import DIRECT_ROUTES, DIRECT_TOKENS
from kvnode.client import BadRequest, Client
from kvnode.node.app import create_app
from tests.drivers import Serve, ServedNode

TOKENS = {"read": "r-Zq8dV3sJ0k", "readwrite": "w-4mXcP1uTf7", "admin": "a-Ly2Hn9QeB5"}


async def answer(
    node: ServedNode, method: str, path: str, token: str = ""
) -> tuple[int, str, dict[str, str]]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    body = b"v" if method in ("PUT", "POST") else None
    async with node.session.request(method, node.url + path, data=body, headers=headers) as response:
        return response.status, await response.text(), dict(response.headers)


def stored_keys(node: ServedNode) -> list[bytes]:
    return node.parts.storage.keys_after(b"", 10)


@pytest.mark.parametrize(
    ("path", "methods", "allowed"),
    [
        ("/v0/entity?id=k", ["POST", "PATCH", "HEAD", "OPTIONS"], "DELETE,GET,PUT"),
        ("/v0/entities?start=a", ["PUT", "POST", "DELETE", "PATCH", "HEAD"], "GET"),
        ("/v0/status", ["PUT", "POST", "DELETE", "PATCH"], "GET"),
        ("/v0/repair", ["PUT", "DELETE"], "GET,POST"),
        ("/v0/versions", ["PUT", "DELETE"], "GET,POST"),
    ],
)
async def test_other_methods_on_known_paths_are_405_naming_those_it_takes(
    served: ServedNode, path: str, methods: list[str], allowed: str
) -> None:
    for method in methods:
        status, text, headers = await answer(served, method, path)
        assert (status, headers["Allow"]) == (405, allowed), (method, path)
        if method != "HEAD":  # a HEAD answer has no body
            bare = path.partition("?")[0]
            assert text == f"{method} is not allowed on {bare}; it takes {allowed.replace(',', ', ')}\n"
    assert stored_keys(served) == []


async def test_unknown_paths_are_404_in_one_line(served: ServedNode) -> None:
    paths = ["/", "/v0", "/v0/", "/v0/entity/", "/v0/entityx?id=k", "/v0/entities/a", "/v1/entity?id=k"]
    paths += ["/V0/ENTITY?id=k", "/nope", "/v0/entity/k"]
    for path in paths:
        for method in ("GET", "PUT", "DELETE"):
            status, text, _ = await answer(served, method, path)
            assert (status, text) == (404, f"no such path: {path.partition('?')[0]}\n"), (method, path)
    status, text, _ = await answer(served, "GET", "/two%0Alines")
    assert (status, text) == (404, "no such path: /two%0Alines\n")  # escaped: still one line
    assert stored_keys(served) == []


async def test_the_hot_routes_are_called_directly(served: ServedNode) -> None:
    app = create_app(served.parts)
    direct = app[DIRECT_ROUTES]
    assert sorted(direct) == [("DELETE", "/v0/entity"), ("GET", "/v0/entity"), ("PUT", "/v0/entity")]
    assert DIRECT_TOKENS not in app  # no token check to make


def write_tokens(path: Path, tokens: dict[str, str]) -> None:
    """A tokens file of ``tokens`` (role: token)."""
    path.write_text("".join(f"{token} {role}\n" for role, token in tokens.items()))
    path.chmod(0o600)


@pytest.fixture
def tokens_file(tmp_path: Path) -> Path:
    path = tmp_path / "tokens"
    write_tokens(path, TOKENS)
    return path


async def test_with_tokens_a_request_needs_a_token_whose_role_allows_it(
    serve: Serve, tokens_file: Path
) -> None:
    node = await serve(auth_tokens_file=tokens_file)
    assert create_app(node.parts)[DIRECT_TOKENS] is node.parts.tokens  # the gate checks the hot routes'
    status, text, headers = await answer(node, "GET", "/v0/entity?id=k")
    assert (status, text) == (401, unauthorized_reason(None) + "\n")
    assert text.startswith("no client token: send 'Authorization: Bearer TOKEN'")
    assert headers["WWW-Authenticate"] == 'Bearer realm="kvnode"'
    status, text, _ = await answer(node, "GET", "/v0/entity?id=k", "not-a-token")
    assert (status, text) == (401, unauthorized_reason("Bearer not-a-token") + "\n")
    assert text.startswith("a client token this node does not know: check it against the node's")
    assert (await answer(node, "PUT", "/v0/entity?id=k", TOKENS["read"]))[:2] == (
        403,
        "a read token may not PUT /v0/entity\n",
    )
    assert (await answer(node, "PUT", "/v0/entity?id=k", TOKENS["readwrite"]))[0] == 201
    assert (await answer(node, "GET", "/v0/entity?id=k", TOKENS["read"]))[:2] == (200, "v")
    assert (await answer(node, "POST", "/v0/repair", TOKENS["readwrite"]))[0] == 403
    assert (await answer(node, "POST", "/v0/repair", TOKENS["admin"]))[0] == 202
    assert (await answer(node, "GET", "/v0/status"))[0] == 200  # open to anyone
    assert (await answer(node, "GET", "/metrics"))[0] == 401


async def test_the_hot_routes_tokens_are_checked_alike_through_the_router_and_after_a_reload(
    serve: Serve, tokens_file: Path
) -> None:
    node = await serve(auth_tokens_file=tokens_file)
    # An escaped path and an Expect header take the router's way, through the app's token check.
    for path, headers in (("/v0/%65ntity?id=k", {}), ("/v0/entity?id=k", {"Expect": "100-continue"})):
        for token, status in ((TOKENS["read"], 403), (TOKENS["readwrite"], 201), ("", 401)):
            sent = {**headers, **({"Authorization": f"Bearer {token}"} if token else {})}
            async with node.session.put(node.url + path, data=b"v", headers=sent) as response:
                assert response.status == status, (path, headers, token)
    assert node.parts.tokens is not None
    write_tokens(tokens_file, {"read": "new-token", "admin": TOKENS["admin"]})
    node.parts.tokens.reload()  # what SIGHUP does
    assert (await answer(node, "GET", "/v0/entity?id=k", TOKENS["read"]))[0] == 401
    assert (await answer(node, "GET", "/v0/entity?id=k", "new-token"))[:2] == (200, "v")


async def test_the_client_library_reports_a_missing_or_unknown_token_as_a_bad_request_401(
    serve: Serve, tokens_file: Path
) -> None:
    """docs/client.md's promise, from ``async with Client(...)`` on: BadRequest with the status and the
    node's line (it raised Unreachable, "answered 401 a client token is needed", for both)."""
    node = await serve(auth_tokens_file=tokens_file)
    for token in (None, "not-a-token"):
        with pytest.raises(BadRequest) as unauthorized:
            async with Client(node.url, token=token):
                pass
        expected = unauthorized_reason(None if token is None else f"Bearer {token}")
        assert (unauthorized.value.status, unauthorized.value.reason) == (401, expected)
    async with Client(node.url, token=TOKENS["readwrite"]) as kv:  # a valid token: members from /v0/status
        assert len(kv.members) == 1


async def test_metrics_open_lets_metrics_answer_without_a_token(serve: Serve, tokens_file: Path) -> None:
    node = await serve(auth_tokens_file=tokens_file, metrics_open=True)
    assert (await answer(node, "GET", "/metrics"))[0] == 200
    assert (await answer(node, "GET", "/v0/stats"))[0] == 401
