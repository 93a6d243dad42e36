"""Nodes served in this process (tests/drivers.py) for the tests of a node's endpoints that need no
process of their own."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.drivers import Serve, ServedNode, served_nodes


@pytest.fixture
async def serve(tmp_path: Path) -> AsyncIterator[Serve]:
    """serve(**NodeConfig options) -> a node served in this process until the test ends."""
    async with served_nodes(tmp_path) as start:
        yield start


@pytest.fixture
async def served(serve: Serve) -> ServedNode:
    """A node of one, with the default configuration."""
    return await serve()
