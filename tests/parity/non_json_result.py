# Results that are not JSON come back as their repr: sets, tuples keyed dicts, objects, nan.
from fractions import Fraction


class Point:
    def __init__(self, x, y):
        self.x, self.y = x, y

    def __repr__(self):
        return f"Point({self.x}, {self.y})"


print("building")
{(1, 2): Point(1, 2), "frac": Fraction(1, 3), "set": frozenset({3}), "nan": float("nan"), "bytes": b"\x00ab"}
