"""Operator tooling around a node, below the server: the command line and its flags (cli, flags,
argtypes), local server processes by PID (processes), who holds a data dir (data_dir), local clusters
and the ``cluster`` command (cluster_config, local_cluster, certs: its throwaway certificates for
``--tls``), and ``admin``. The server modules never
import this package."""
