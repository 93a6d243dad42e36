"""The membership a node runs with, and changes to it: the members and a channel to each peer, a newer
membership stored and run with as kvnode.topology.adoption says (members); how every change is made, the
claimant first, and the changes a member starts when asked: leave, a new replication factor, a join undone
(changes); a node becoming a member by a join or a replace (bootstrap); the node's own part in a change it
walks, step by step as kvnode.topology.change_steps says, and its progress (own_part); the streams of
records (streams); the claimant's watcher that undoes a join that never comes (join_watcher); the points
where a test may crash a node mid-change (crash_points). Drivers over kvnode.topology's pure values."""
