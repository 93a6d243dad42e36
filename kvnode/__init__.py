"""kvnode: a small Dynamo-style distributed key-value store on aiohttp, uvloop and LevelDB.

The request path, top to bottom:

    connections   connections counted and timed (the descriptor limit, --max-connections, header and
                  idle timeouts): the one hook into aiohttp's server
    admission     requests and body bytes in progress; 503 beyond --max-inflight(-bytes)
    http_api      client HTTP handlers: parse and validate, then hand over to
    coordinator   placement, hybrid-clock timestamps, read merge (read_repair), hints for missed writes;
                  runs a fan-out strategy from
    fanout        async, sync and speculative side by side, counting with quorum
    replica       replica calls: local storage directly, peers over an authenticated, multiplexed
                  WebSocket (peer, channel, server, auth, wire); hinted handoff (hints)
    storage       LevelDB through plyvel, one versioned record per key (records), writable again by
                  itself after a full disk; the node's own state in system_db (the clock's floor, hints)

Around it: parts (a node's parts, opened and closed in one place), node (its aiohttp app), serving (one
process until SIGTERM), config (a node's configuration), tls (its SSL contexts), client_auth (client
tokens and their roles), placement and clock (pure), clock_offsets and
clock_fence (each peer's clock offset, and whether this node's clock is the one that is off), metrics
(histograms), snapshot, observe and exporter (/v0/stats, /v0/cluster, /metrics), uploads (request bodies
being read), memory (memory given back after large values), client (a Python client that routes each
request to a replica of its key). Below the
server, never imported by it: ops (the command line and its flags, local processes and clusters, admin:
an operator's view).
"""

__version__ = "0.1.0"
