"""Auth's rules: origins and their cookies, roles, redirects; pure (no I/O, no clients)."""
