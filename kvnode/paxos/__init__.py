"""Conditional writes by single-decree Paxos per key, as Cassandra's lightweight transactions: the pure
cores (no I/O, no timers, no clock read), and the two thin drivers that feed them messages and clock
readings and act on what they return (docs/conditional-writes.md).

ballot      ballots: unique to a node, ordered, above every ballot seen; their codec
conditions  ETags naming versions; If-Match / If-None-Match parsed and judged against a version
messages    prepare, promise, propose, accept, commit and refusal, and their byte codec
acceptor    an acceptor's durable state for one key, its transitions and its codec
proposer    one round (a conditional write or a serial read) as a state machine over the key's owners;
            the quorum of a membership change, the contention backoff
acceptor_calls  the acceptor's driver: a peer's PREPARE, PROPOSE and COMMIT answered from durable state
rounds      the proposer's driver: a round run among the key's owners, its figures
"""
