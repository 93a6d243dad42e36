"""The request path compiled by mypyc, where a build of exactly these sources exists; the pure modules
otherwise. Chosen once, as a node process starts (kvnode.__main__), before any of HOT_MODULES is
imported.

A build (``python -m kvnode.ops.compile``, ``make compiled``) is a copy of the kvnode package with
HOT_MODULES compiled beside their sources, kept under the interpreter's prefix (the virtual environment)
and named by a digest of every source file of the package and of the interpreter: a build of other
sources is never used, so an edited module runs as edited (pure) until the next build. ``KVNODE_PURE=1``
keeps the pure modules, as a process that imported any of HOT_MODULES first does (the test suite's warm
fork server): py-spy and memray see a compiled module's functions as one native frame.

Compiled, the coordinator's CPU per PUT is 0.83-0.86x the pure one's under ``make bench``
(docs/benchmarks.md, "2026-12-02, later: the compiled hot path").
"""

from __future__ import annotations

import hashlib
import os
import sys
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path

__all__ = [
    "HOT_MODULES",
    "PURE_ENV",
    "STAMP",
    "activate",
    "build_dir",
    "builds_dir",
    "describe",
    "package_dir",
    "planned",
    "pure_asked",
    "sources_digest",
    "why_pure",
]

# The modules a GET or PUT runs through at saturation (the saturation profile's kvnode frames), each
# typed strictly enough for mypyc. Not kvnode.access.connections: its protocol subclasses aiohttp's.
HOT_MODULES = (
    "kvnode.node.client_api",
    "kvnode.node.params",
    "kvnode.node.query",
    "kvnode.access.admission",
    "kvnode.access.uploads",
    "kvnode.coordinator.coordinator",
    "kvnode.coordinator.fanout",
    "kvnode.coordinator.quorum",
    "kvnode.replica.peer",
    "kvnode.replica.inflight",
    "kvnode.replica.outbox",
    "kvnode.replica.local",
    "kvnode.replica.apply",
    "kvnode.replica.storage_calls",
    "kvnode.replica.channel.client",
    "kvnode.replica.channel.server",
    "kvnode.replica.channel.answerers",
    "kvnode.replica.channel.protocol",
    "kvnode.replica.channel.wire",
    "kvnode.replica.channel.websocket",
    "kvnode.storage.keyspace",
    "kvnode.storage.group_commit",
    "kvnode.storage.records",
    "kvnode.healing.summary",
    "kvnode.healing.upkeep",
    "kvnode.topology.placement",
    "kvnode.clocks.hybrid",
    "kvnode.paxos.conditions",
    "kvnode.metrics",
)
PURE_ENV = "KVNODE_PURE"
STAMP = "kvnode-compiled.json"  # written last: a build without it is unfinished


def package_dir() -> Path:
    return Path(__file__).resolve().parent


def sources_digest(package: Path) -> str:
    """A build's name: a digest of every source file under ``package`` (path and bytes) and of the
    interpreter its extension modules are built for."""
    digest = hashlib.blake2b(digest_size=10)
    digest.update(f"{sys.implementation.cache_tag} {sys.platform} {EXTENSION_SUFFIXES[0]}\n".encode())
    for path in sorted(package.rglob("*.py")):
        source = path.read_bytes()
        digest.update(f"{path.relative_to(package).as_posix()} {len(source)}\n".encode())
        digest.update(source)
    return digest.hexdigest()


def builds_dir() -> Path:
    return Path(sys.prefix) / "kvnode-compiled"


def build_dir() -> Path:
    """Where the build of this package's sources is, or would be."""
    return builds_dir() / sources_digest(package_dir())


def pure_asked() -> bool:
    """Whether KVNODE_PURE asks for the pure modules."""
    return os.environ.get(PURE_ENV, "") not in ("", "0")


def _usable_build() -> Path | None:
    """The finished build of these sources, unless KVNODE_PURE asks for none."""
    if pure_asked():
        return None
    build = build_dir()
    return build if (build / STAMP).is_file() else None


def planned() -> bool:
    """Whether a node started now, with this environment, runs the compiled hot path (a benchmark's
    report says which it measured)."""
    return _usable_build() is not None


def why_pure() -> str:
    """Why a node runs the pure modules, in a few words."""
    return f"{PURE_ENV} set" if pure_asked() else "make compiled builds it"


def activate() -> Path | None:
    """Import HOT_MODULES, from here on, from the build of these sources: its directory, or None (no such
    build, KVNODE_PURE set, or one of them already imported)."""
    build = None if any(name in sys.modules for name in HOT_MODULES) else _usable_build()
    if build is None:
        return None
    sys.path.insert(0, str(build))  # the build's shared runtime library is a top-level module
    sys.modules["kvnode"].__path__.insert(0, str(build / "kvnode"))  # every subpackage found there first
    return build


def describe() -> str:
    """Which of HOT_MODULES this process runs compiled, in a few words for its log."""
    loaded = [sys.modules[name] for name in HOT_MODULES if name in sys.modules]
    compiled = sum(1 for module in loaded if str(module.__file__).endswith(tuple(EXTENSION_SUFFIXES)))
    if compiled:
        return f"hot path compiled by mypyc ({compiled} of {len(HOT_MODULES)} modules)"
    return f"hot path pure Python ({why_pure()})"
