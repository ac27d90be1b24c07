"""A submission that forks without end."""
import os

while True:
    try:
        os.fork()
    except OSError:
        pass
