"""The membership a node runs with, and changes to it: the members and a channel to each peer, a newer
membership fetched, offered, stored and adopted (members); join, replace, leave and a new replication
factor, each offered to the claimant, stored, offered to the rest, and the node's own part in them
(changes); their streams of records (streams); the points where a test may crash a node mid-change
(crash_points). Drivers over kvnode.topology's pure values."""
