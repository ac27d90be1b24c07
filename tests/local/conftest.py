"""Local-setup tests. Real: the control plane and its deployment/replicaset controllers
(tests/conftest.py), the runner's processes (the demo environment, or a Template's own
command), the `userland local` command with its operator, gateway and Redis. Nothing is faked.
"""
