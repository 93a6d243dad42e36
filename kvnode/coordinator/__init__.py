"""Coordinating a client request: a key's replicas, write timestamps, read merge and hints (coordinator);
the fan-out strategies side by side, async, sync and speculative (fanout); the ack/from rules and the
tally of answers (quorum, pure); the newest version sent to stale replicas after a read (read_repair); the
cluster-wide scan, a k-way merge of every member's pages (scan); a write crossing to another datacenter
once: which owner forwards it there and the FORWARD call's codec (forwards, pure), and both ends of that
call, the coordinator's batch of a datacenter's owners and the forwarder's relay (forwarding)."""
