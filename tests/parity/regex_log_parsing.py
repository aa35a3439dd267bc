# Parse an access log with regular expressions and summarise it: what agents do with server logs.
import re
from collections import Counter

LOG = """\
127.0.0.1 - - [02/Dec/2026:10:15:32 +0000] "GET /api/users?id=42 HTTP/1.1" 200 512 "-" "curl/8.5"
10.0.0.7 - alice [02/Dec/2026:10:15:33 +0000] "POST /api/orders HTTP/1.1" 201 128 "-" "Mozilla/5.0"
10.0.0.7 - alice [02/Dec/2026:10:15:35 +0000] "GET /static/app.js HTTP/1.1" 304 0 "-" "Mozilla/5.0"
192.168.1.20 - - [02/Dec/2026:10:16:01 +0000] "GET /api/users?id=7 HTTP/1.1" 404 64 "-" "python-requests/2.32"
127.0.0.1 - - [02/Dec/2026:10:16:09 +0000] "DELETE /api/orders/9 HTTP/1.1" 500 1024 "-" "curl/8.5"
garbage line that does not match
"""

PATTERN = re.compile(
    r'(?P<ip>\d+(?:\.\d+){3}) \S+ (?P<user>\S+) \[(?P<when>[^\]]+)\] '
    r'"(?P<method>[A-Z]+) (?P<path>\S+) HTTP/[\d.]+" (?P<status>\d{3}) (?P<size>\d+)'
)

rows, rejected = [], []
for line in LOG.splitlines():
    m = PATTERN.match(line)
    (rows if m else rejected).append(m.groupdict() if m else line)

by_status = Counter(r["status"][0] + "xx" for r in rows)
endpoints = Counter(re.sub(r"\d+", "{id}", r["path"].split("?")[0]) for r in rows)
print("parsed", len(rows), "rejected", rejected)
for status, n in sorted(by_status.items()):
    print(f"{status}: {n}")
print(endpoints.most_common(3))
print(re.sub(r"(?<=id=)\d+", lambda m: "#" * len(m.group()), LOG.splitlines()[0]))
print(re.findall(r"\b[A-Z]{3,6}\b", LOG)[:6])
print(re.split(r"[,;]\s*", "a, b;c ;  d"))
{"bytes": sum(int(r["size"]) for r in rows), "users": sorted({r["user"] for r in rows})}
