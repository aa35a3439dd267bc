import typing, pydantic, pydantic_core, annotated_types, typing_inspection.typing_objects
from typing import Annotated
class User(pydantic.BaseModel):
    name: str
    age: Annotated[int, annotated_types.Gt(0)]
u = User.model_validate_json('{"name": "ada", "age": "36"}')
print(u.age + 1, u.model_dump_json())
try:
    User(name="x", age=0)
except pydantic.ValidationError as e:
    print(e.errors()[0]["type"])
print(pydantic_core.from_json('[1, {"a": null}]'), typing_inspection.typing_objects.is_any(typing.Any))
import attrs
@attrs.define
class P:
    x: int
    y: int = 2
print(attrs.asdict(P(1)))
import dateutil.parser, dateutil.relativedelta, pytz, tzdata, datetime
d = dateutil.parser.parse("2024-01-31T10:00:00")
print(d + dateutil.relativedelta.relativedelta(months=1))
print(pytz.timezone("Europe/Paris").localize(datetime.datetime(2024, 7, 1, 12)).isoformat())
from zoneinfo import ZoneInfo
print(datetime.datetime(2024, 1, 1, tzinfo=ZoneInfo("Asia/Tokyo")).utcoffset())
import tabulate
print(tabulate.tabulate([["a", 1], ["bb", 22]], headers=["k", "v"], tablefmt="github"))
