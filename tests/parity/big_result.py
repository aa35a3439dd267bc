# The last expression is a large nested structure: compared as the result, not as output.
import math

points = [{"id": i, "xy": [round(math.cos(i / 10), 9), round(math.sin(i / 10), 9)], "tags": [f"t{i % 7}"] * (i % 3),
           "ok": i % 5 != 0, "none": None} for i in range(2000)]
index = {f"k{i:04d}": {"sq": i * i, "bits": bin(i)} for i in range(500)}
{"points": points, "index": index, "nested": [[[i, [i * 2]]] for i in range(50)], "big": 2**100, "ratio": 1 / 7}
