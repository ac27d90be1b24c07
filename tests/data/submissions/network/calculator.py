"""A submission that tries to reach the network (to fetch answers or send the tests away)."""
import socket

try:
    socket.create_connection(("1.1.1.1", 53), timeout=2).close()
    REACHED = True
except OSError:
    REACHED = False


def add(a, b):
    return (a + b) if not REACHED else -1


def multiply(a, b):
    return a * b


def divide(a, b):
    return a / b
