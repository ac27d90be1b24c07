"""The local runner's rules: a Pod's plan and status; pure (no I/O, no clients)."""
