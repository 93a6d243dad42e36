"""What a node keeps on disk: the versioned record and its ordering (records), the client keyspace in
LevelDB, one record per key written only if newer, a full disk's refusals marked until made good
(keyspace), an event-loop iteration's writes gathered into one LevelDB write (group_commit), versions as a
stream of length-prefixed frames for backups (frames), and the node's own state, one named part per
prefix, with the data dir's format (system_db)."""
