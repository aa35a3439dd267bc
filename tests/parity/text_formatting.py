# Report formatting: f-string format specs, textwrap, pprint, str methods, templates.
import pprint
import string
import textwrap

rows = [("alpha", 3.14159, 12), ("beta", 2.5, 1234567), ("gamma-ray", -0.000123, -5)]
print(f"{'name':<10}|{'value':>12}|{'count':>10}")
for name, value, count in rows:
    print(f"{name:<10}|{value:>12.4g}|{count:>10,}")
print(f"{255:#x} {255:08b} {0.25:.1%} {1234.5:_.2f} {'x':*^9} {-7:+d} {3e10:e}")
print("{0[1]} {k.real} {1!r:>8}".format(["a", "b"], "s", k=3 + 4j))
doc = ("Agents often have to wrap long text returned by a tool so that it fits in a narrow column, "
       "keeping words whole and indenting continuation lines consistently.")
print(textwrap.fill(doc, width=40, initial_indent="* ", subsequent_indent="  "))
print(textwrap.shorten(doc, width=50, placeholder=" [...]"))
print(textwrap.dedent("""
    def f():
        return 1
""").strip())
data = {"users": [{"id": i, "tags": ["x" * i, "y"], "meta": {"score": i * 1.5}} for i in range(4)]}
pprint.pprint(data, width=60, sort_dicts=True)
print(string.Template("$who likes ${what}").safe_substitute(who="Ann"))
print("Straße".upper(), "ǅ".lower(), "hello world".title(), "  pad ".strip().center(9, "."), "a,b,,c".split(","))
print(repr("tab\there 'quote' \"dq\""), ascii("é→"))
