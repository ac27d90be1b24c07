"""A submission that never returns."""

while True:
    pass
