"""kvnode: a small Dynamo-style distributed key-value store on aiohttp, uvloop and LevelDB.

The packages, each importing only those listed below it (tests/test_imports.py checks it):

    ops          tooling: the command line and its flags, local processes and clusters, admin
    node         the node process: its endpoints (client_api, scan_api, operator_api, versions_api, stats,
                 exporter), its parts (parts, built by wiring), its aiohttp app and serving
    client       the Python client, routing each request to a replica of its key
    cluster      the membership a node runs with (members) and changes to it: how each is made and
                 those a member starts (changes), a join or replace (bootstrap), a node's own part
                 (own_part), streams, a join undone (join_watcher), the crash points (crash_points)
    coordinator  a client request: placement, timestamps, read merge and hints (coordinator), the
                 fan-out strategies side by side (fanout), ack/from (quorum), read_repair
    healing      anti-entropy (summary, upkeep, listing, exchange, anti_entropy, outcomes, repair_calls),
                 GC of tombstones, expired versions and surplus copies (gc_rule, gc) and rebuilding a node
                 that lost its disk (rebuild_state, rebuild)
    access       who may use a node and how much: connections, client_auth, admission, uploads, tls
    replica      reaching a key's replicas: this node's storage (local, and storage_calls, its answers to
                 peers), peers over one authenticated, multiplexed WebSocket each (peer and its parts;
                 the channel itself, both ends, in replica/channel), apply (the one way a version is
                 stored), errors, readiness, hinted handoff (hints)
    storage      records, the client keyspace in LevelDB (keyspace) and its group commit, the node's own
                 state (system_db), versions as a stream of frames (frames)
    topology     who owns what, pure: placement, membership, epoch (what a node runs with between two
                 changes, handed to every part), adoption, versions_heard, change_steps, join_watch
    clocks       time, which is not trusted: the hybrid clock (hybrid), peers' offsets, the fence
    loop_lag     the event loop's lag, and the verdict on starvation that sheds clients
    config, figures, metrics, memory, scheduling, hot_path   the configuration (one frozen dataclass), how
                 a part's figures are described, latency histograms, memory given back after large values,
                 the background drivers' tasks, the request path compiled by mypyc where it is built

docs/architecture.md has every module and its job.
"""

__version__ = "0.1.0"
