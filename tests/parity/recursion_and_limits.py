# Deep recursion: a depth Python allows, then one it refuses with RecursionError.
import sys


def depth(n):
    return 0 if n == 0 else 1 + depth(n - 1)


print(sys.getrecursionlimit(), depth(800))


def forever(n):
    return forever(n + 1)


try:
    forever(0)
except RecursionError as e:
    print("RecursionError:", e)
nested = []
for _ in range(200):
    nested = [nested]
print(len(repr(nested)))
print(int("1" * 4000) % 97)
try:
    int("1" * 5000)
except ValueError as e:
    print(str(e)[:60])
