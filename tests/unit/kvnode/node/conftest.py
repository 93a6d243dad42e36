"""Nodes served in this process (tests/drivers.py) for the tests of a node's endpoints that need no
process of their own."""

from __future__ import annotations

import pytest

from kvnode.ops.ports import free_ports
from tests.drivers import Serve, ServedNode


@pytest.fixture
async def served(serve: Serve) -> ServedNode:
    """A node of one, with the default configuration."""
    return await serve()


@pytest.fixture
async def one_of_three(serve: Serve) -> ServedNode:
    """A node of three whose two peers are not served (nothing answers on their ports)."""
    ports = free_ports(3)
    return await serve(port=ports[0], cluster=tuple(f"http://127.0.0.1:{port}" for port in ports))
