"""The gateway's rules: routing, headers, what a request gets; pure (no I/O, no clients)."""
