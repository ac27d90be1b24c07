"""The shared model: names, typed objects, settings, rules; pure (no I/O, no clients)."""
