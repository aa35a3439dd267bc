# Wheelhouse packages (installed on first import, from the same wheels in both hosts): pydantic
# with its wasm core, dateutil with tzdata, tabulate.
import datetime

import dateutil.parser
import dateutil.relativedelta
import pydantic
import tabulate


class Order(pydantic.BaseModel):
    id: int
    placed: datetime.datetime
    total: float


orders = [Order.model_validate({"id": i, "placed": f"2024-0{i}-28T09:30:00", "total": f"{i * 12.5}"}) for i in range(1, 5)]
rows = [[o.id, (o.placed + dateutil.relativedelta.relativedelta(months=1)).date(), o.total] for o in orders]
print(tabulate.tabulate(rows, headers=["id", "due", "total"], tablefmt="github"))
try:
    Order(id="x", placed="soon", total=1)
except pydantic.ValidationError as e:
    print(sorted(err["loc"][0] for err in e.errors()))
print(dateutil.parser.parse("March 3 2025 14:05 UTC").isoformat())
