"""What a node keeps on disk: the versioned record and its ordering (records), the client keyspace in
LevelDB, one record per key written only if newer (keyspace), and the node's own state, one named part per
prefix, with the data dir's format (system_db)."""
