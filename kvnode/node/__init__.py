"""A node process: its parts as one value (parts), built in dependency order and closed in reverse
(wiring), its aiohttp application (app), serving until a signal (serving); its endpoints: the client API
(client_api, its parameters in params and query, conditional writes and serial reads in conditional_api,
the cluster-wide scan in scan_api), the operator's commands (operator_api), every version streamed and
written back for backups (versions_api), /v0/stats and /v0/cluster (stats) and /metrics (exporter), with
the one snapshot of its figures (snapshot). The peers' replica channel is served by
kvnode.replica.channel.server, each call answered by the part that owns it (wiring registers them)."""
