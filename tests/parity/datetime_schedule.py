# Compute a meeting schedule from fixed dates (no wall clock): timedelta, formatting, ISO parsing.
from datetime import date, datetime, time, timedelta, timezone

start = datetime(2026, 3, 27, 9, 30, tzinfo=timezone.utc)
offsets = [timezone(timedelta(hours=h), name) for h, name in [(-5, "NYC"), (1, "CET"), (5.5, "IST"), (9, "JST")]]
for i in range(4):
    slot = start + timedelta(weeks=i, days=i % 2)
    local = ", ".join(f"{tz.tzname(None)} {slot.astimezone(tz):%a %H:%M}" for tz in offsets)
    print(slot.isoformat(), "|", local)

d = date(2024, 2, 28)
print([str(d + timedelta(days=n)) for n in range(3)])
print(date(2026, 12, 31).isocalendar(), date(2026, 1, 1).strftime("%A %d %B %Y (day %j)"))
print(datetime.fromisoformat("2026-07-04T12:00:00+02:00").astimezone(timezone.utc))
print(datetime.strptime("03/15/26 14:05", "%m/%d/%y %H:%M").replace(tzinfo=timezone.utc).timestamp())
print(datetime(2026, 1, 1) - datetime(2025, 6, 15, 8, 45))
print(time(23, 59, 59, 999999).isoformat(timespec="milliseconds"))
business_days = sum(1 for n in range(31) if (date(2026, 5, 1) + timedelta(days=n)).weekday() < 5)
{"business_days_may_2026": business_days, "leap": [y for y in range(2020, 2033) if date(y, 3, 1) - date(y, 2, 28) == timedelta(days=2)]}
