"""kvnode: a small Dynamo-style distributed key-value store on aiohttp, uvloop and LevelDB.

The request path, top to bottom:

    http_api      HTTP handlers: parse and validate, then hand over to
    coordinator   placement, timestamps, read merge; runs a fan-out strategy from
    fanout        async (parallel) and sync (sequential) side by side, counting with quorum
    transport     replica calls: local storage directly, peers over a multiplexed WebSocket (wire)
    storage       LevelDB through plyvel, one versioned record per key (records)

Around it: cli and config (flags and environment), node (one process's lifecycle), local_cluster
(several nodes on one machine), placement and clock (pure), metrics (latency histograms).
"""

__version__ = "0.1.0"
