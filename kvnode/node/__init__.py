"""A node process: its parts opened and closed in one place (parts), its aiohttp application (app), serving
until a signal (serving); its endpoints: the client API (client_api), the peers' replica channel
(peer_api), the operator's commands (operator_api), /v0/stats and /v0/cluster (stats) and /metrics
(exporter), with the one snapshot of its figures (snapshot)."""
