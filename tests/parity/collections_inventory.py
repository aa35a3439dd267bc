# Inventory bookkeeping with Counter, defaultdict, deque, namedtuple and OrderedDict.
from collections import ChainMap, Counter, OrderedDict, defaultdict, deque, namedtuple

Item = namedtuple("Item", "sku name qty price")
stock = [Item("A1", "bolt", 120, 0.05), Item("B2", "nut", 300, 0.02), Item("C3", "washer", 0, 0.01),
         Item("A1", "bolt", 30, 0.05), Item("D4", "gear", 7, 12.5)]

totals = Counter()
names = {}
for it in stock:
    totals[it.sku] += it.qty
    names[it.sku] = it.name
print(totals.most_common())
print(+totals, totals - Counter(A1=100, B2=1))

by_price = defaultdict(list)
for it in stock:
    by_price["cheap" if it.price < 1 else "dear"].append(it.sku)
print(dict(by_price))

recent = deque(maxlen=3)
for event in ["in:A1", "out:B2", "in:C3", "out:A1", "in:D4"]:
    recent.append(event)
recent.rotate(1)
print(list(recent), recent.maxlen)

lru = OrderedDict()
for key in "abcabdae":
    lru[key] = lru.get(key, 0) + 1
    lru.move_to_end(key)
    if len(lru) > 3:
        lru.popitem(last=False)
print(lru)
print(ChainMap({"qty": 1}, {"qty": 5, "unit": "pcs"})["unit"], Item._fields, stock[0]._replace(qty=1))
{"value": round(sum(it.qty * it.price for it in stock), 2), "skus": sorted(names)}
