# Classes the way agents write helpers: ABCs, properties, dunder methods, descriptors, slots.
from abc import ABC, abstractmethod
from functools import total_ordering


class Shape(ABC):
    @abstractmethod
    def area(self): ...

    def __str__(self):
        return f"{type(self).__name__}(area={self.area():.3f})"


@total_ordering
class Rect(Shape):
    __slots__ = ("w", "h")

    def __init__(self, w, h):
        self.w, self.h = w, h

    def area(self):
        return self.w * self.h

    def __eq__(self, other):
        return self.area() == other.area()

    def __lt__(self, other):
        return self.area() < other.area()

    def __repr__(self):
        return f"Rect({self.w}, {self.h})"


class Circle(Shape):
    def __init__(self, r):
        self.r = r

    def area(self):
        return 3.141592653589793 * self.r**2


class Positive:
    def __set_name__(self, owner, name):
        self.name = "_" + name

    def __get__(self, obj, objtype=None):
        return getattr(obj, self.name)

    def __set__(self, obj, value):
        if value <= 0:
            raise ValueError(f"{self.name[1:]} must be positive, got {value}")
        setattr(obj, self.name, value)


class Account:
    balance = Positive()

    def __init__(self, balance):
        self.balance = balance


shapes = [Rect(2, 3), Circle(1), Rect(1, 1), Rect(3, 2)]
print([str(s) for s in shapes], sorted(s for s in shapes if isinstance(s, Rect)))
print(Rect(2, 3) == Rect(3, 2), Rect(1, 2) <= Rect(2, 2), Rect.__mro__[1].__name__)
try:
    Shape()
except TypeError as e:
    print(e)
try:
    Account(10).balance = -5
except ValueError as e:
    print(e)
try:
    Rect(1, 1).color = "red"
except AttributeError as e:
    print(e)
print(type("Dyn", (object,), {"x": 1})().x, callable(Rect), hasattr(Rect(1, 1), "__dict__"))
