# Read CSV text, clean it, aggregate per group, and write a CSV report back out.
import csv
import io
import statistics

RAW = """region,rep,quarter,revenue
North,Ann,Q1,"12,500.00"
North,Ann,Q2,13100
South,Bob,Q1,9800.5
South,"O'Neil, Pat",Q2,11200
East,Cy,Q1,
West,Dee,Q2,"7,050.25"
"""

def money(text):
    return float(text.replace(",", "")) if text.strip() else None

rows = list(csv.DictReader(io.StringIO(RAW)))
by_region = {}
for row in rows:
    value = money(row["revenue"])
    if value is not None:
        by_region.setdefault(row["region"], []).append(value)

out = io.StringIO()
writer = csv.writer(out, quoting=csv.QUOTE_NONNUMERIC, lineterminator="\n")
writer.writerow(["region", "n", "mean", "max"])
for region, values in sorted(by_region.items()):
    writer.writerow([region, len(values), round(statistics.mean(values), 2), max(values)])
print(out.getvalue(), end="")
print([r["rep"] for r in rows])
sniffed = csv.Sniffer().sniff("a;b;c\n1;2;3\n")
print("delimiter:", repr(sniffed.delimiter))
{"missing": [r["rep"] for r in rows if money(r["revenue"]) is None]}
