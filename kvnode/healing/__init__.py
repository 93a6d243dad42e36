"""Healing: replicas compare summaries of what they hold and exchange only the records that differ
(anti-entropy), drop what no replica needs any more (GC: tombstones, expired versions, surplus copies),
and a node that lost its disk gets its records back (rebuild), or the writes its full disk refused
(missed_writes).

summary        what a node holds, as one hash tree per peer (tictac: a write updates it by a delta); pure
upkeep         the summaries kept current: every stored record's delta, a rebuild after a crash,
               persisted at a clean stop
listing        the keys of some segments, a bounded page at a time
exchange       one repair with one peer, step by step; pure
anti_entropy   the exchanges with every peer, continuous and paced, or on demand
repair_calls   this node's answers to a peer's repair exchange (BRANCHES, SEGMENTS, LIST)
outcomes       what repairs did: one exchange's outcome, a full repair's progress, the totals; pure
gc_rule        when a tombstone, an expired version or a surplus copy may be dropped for good; pure
gc             the background pass that drops what the rule allows and reclaims the space; a cleanup
               (``admin cleanup``) is one such pass that drops surplus copies without the grace period
cleanup_run    what a cleanup did, as it progresses; pure
missed_writes  the writes this node's storage refused (a full disk), made good by a repair once it writes
rebuild_state  whether this node's data is whole: unknown, rebuilding (its disk was lost), serving; pure
rebuild        acting on it: each state saved, the peers asked, a repair with every peer until all done
"""
