"""The store's rules: never-overwrite hand-outs, zip names; pure (no I/O, no clients)."""
