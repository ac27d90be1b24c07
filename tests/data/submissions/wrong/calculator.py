"""A student's answer with two mistakes."""


def add(a, b):
    return a + b


def multiply(a, b):
    return a + b


def divide(a, b):
    return a // b
