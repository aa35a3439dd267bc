# Domain modelling with dataclasses, enums, typing and structural pattern matching.
from dataclasses import asdict, dataclass, field, replace
from enum import Enum, auto
from typing import Optional


class Status(Enum):
    NEW = auto()
    PAID = auto()
    SHIPPED = auto()


@dataclass(order=True, frozen=True)
class Line:
    sku: str
    qty: int = 1
    price_cents: int = 0


@dataclass
class Order:
    id: int
    lines: list[Line] = field(default_factory=list)
    status: Status = Status.NEW
    note: Optional[str] = None

    @property
    def total(self) -> int:
        return sum(l.qty * l.price_cents for l in self.lines)


def describe(event):
    match event:
        case {"type": "paid", "order": int(oid), "amount": amount} if amount > 0:
            return f"order {oid} paid {amount}"
        case {"type": "shipped", "order": oid, **rest}:
            return f"order {oid} shipped via {rest.get('carrier', '?')}"
        case [first, *others]:
            return f"batch of {1 + len(others)} starting with {first!r}"
        case _:
            return "unknown event"


o = Order(7, [Line("X", 2, 499), Line("A", 1, 1250), Line("M", 3, 75)])
print(o)
print(sorted(o.lines)[0], o.total, replace(o, status=Status.PAID).status)
print(asdict(o)["lines"][1], Status["SHIPPED"].value, list(Status))
for ev in [{"type": "paid", "order": 7, "amount": 2473}, {"type": "shipped", "order": 7, "carrier": "DHL"},
           ["a", "b", "c"], 42]:
    print(describe(ev))
try:
    Line("Q").qty = 5
except Exception as e:
    print(type(e).__name__, e)
{"order": asdict(o) | {"status": o.status.name}}
