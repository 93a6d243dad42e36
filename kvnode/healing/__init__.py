"""Anti-entropy: replicas compare summaries of what they hold and exchange only the records that differ.

summary        what a node holds, as one hash tree per peer (tictac: a write updates it by a delta); pure
upkeep         the summaries kept current: every stored record's delta, a rebuild after a crash,
               persisted at a clean stop
gc_rule        when a tombstone or an expired version may be dropped for good; pure
gc_pass        tombstone GC's background pass: drops what the rule allows, reclaims the space
rebuild_state  whether this node's data is whole: unknown, rebuilding (its disk was lost), serving; pure
rebuild        acting on it: each state saved, the peers asked, a repair with every peer until all done
"""
