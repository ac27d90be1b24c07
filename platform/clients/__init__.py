"""The platform's I/O edge: Kubernetes, Redis, the store, logs and metrics."""
