"""A submission that writes without end, to its output and to a file."""
import sys

block = "x" * 65536
with open("big-output.txt", "w") as out:
    try:
        for _ in range(160000):  # 10 GiB
            out.write(block)
    except OSError:
        pass
for _ in range(160000):
    sys.stdout.write(block)
