"""The operator's rules: what each object should be; pure (no I/O, no clients)."""
