"""Make this print your own name, then run it: python3 hello.py"""

name = "world"
print(f"Hello, {name}!")
