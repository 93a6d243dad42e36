"""Coordinating a client request: a key's replicas, write timestamps, read merge and hints (coordinator);
the fan-out strategies side by side, async, sync and speculative (fanout); the ack/from rules and the
tally of answers (quorum, pure); the newest version sent to stale replicas after a read (read_repair); the
cluster-wide scan, a k-way merge of every member's pages (scan)."""
