"""Operator tooling around a node, below the server: the command line (cli, parsing: one-line errors and "did
you mean"), its flags (flag_table, flags, argtypes), local server processes by PID (processes, ports), a
local server's output held until it serves (output_relay), who holds a data dir (data_dir), local clusters
and the ``cluster`` command (cluster_config, local_cluster, certs: throwaway certificates for ``--tls``),
``admin`` (admin, admin_reports, admin_render, node_http) and its backup and restore (backup, restore,
backup_rules, node_streams), the hot path's compiled build (compile), the optional extras a tool needs
(extras), and hosts made of network namespaces, for the check's partitions, the WAN test bed and the suite
(netns). The server modules never import this package."""
