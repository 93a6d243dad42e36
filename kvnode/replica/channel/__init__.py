"""The replica channel, one package: how nodes call each other. Both ends side by side, each mirroring the
other, over the codecs and the one table of calls they share:

    wire        the protocol's messages: calls and replies in frames, and their payloads (pure)
    websocket   just enough RFC 6455 for the client end (pure)
    protocol    the versions a node speaks and the one both ends of a channel use, and the table of calls:
                for each op the version it came in and what each answering status resolves to (pure)
    handshake   both ends prove they hold the cluster secret, and introduce themselves (pure)
    identities  what this node says of itself in a handshake, and remembers of the peers it met
    client      the client end: an asyncio protocol that upgrades a connection and parses frames in place
    server      the server end: the aiohttp route that admits a peer and answers its frames
    answerers   the server end's calls: one answerer an op, registered by the part of the node that owns
                what it asks, and a frame's calls answered together (a FORWARD's answer later: deferred)

A new call is its op (``wire.Op``) and its row in ``protocol.PROTOCOL``; the part that owns what it asks
registers its answerer (kvnode.node.wiring wires them: the storage's calls in kvnode.replica.storage_calls,
the clock's in kvnode.replica.clock_probe, anti-entropy's in kvnode.healing.repair_calls, the membership's
in kvnode.cluster.membership_calls, a forwarded write's in kvnode.coordinator.forwarding), and a caller
makes it with ``PeerReplica.call``
(kvnode.replica.peer, which holds the client end's calls in flight and waiting: kvnode.replica.inflight,
kvnode.replica.outbox).
"""
