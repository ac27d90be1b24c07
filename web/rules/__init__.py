"""The web UI's rules: what its pages show and who may act; pure (no I/O, no clients)."""
