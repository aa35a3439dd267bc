# An uncaught exception deep in the script's own functions: the traceback uses the script's lines.
import json


def load(text):
    return json.loads(text)


def total(orders):
    return sum(o["amount"] for o in orders)


def report(raw):
    orders = load(raw)
    print(f"{len(orders)} orders")
    return total(orders)


print("starting")
report('[{"amount": 5}, {"amount": 7}, {"amout": 1}]')
print("never printed")
