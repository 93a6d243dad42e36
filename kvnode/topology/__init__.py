"""Who the members are and who owns what, as pure values: rendezvous placement, zone- and host-aware, N
owners in each datacenter (placement); the cluster's identity and its versioned membership, with each
member's zone and datacenter (membership); what a node runs with between two changes, as one value every
part is handed (epoch); what taking a newer membership takes (adoption); the versions peers said
(versions_heard); a membership change step by step, as typed actions, and who is offered a change first
(change_steps); when a claimed join that never comes is undone (join_watch). No I/O: the drivers in
kvnode.cluster act on them."""
