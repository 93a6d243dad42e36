"""Who may use a node, and how much of it: connections counted and timed (connections), its ports bound
first and served with the TLS handshake under the header timeout (listening), client tokens and their roles
(client_auth), requests and body bytes in progress (admission), request bodies being read (uploads), and
the TLS contexts (tls)."""
