import msgpack, msgspec, jiter, xxhash, bitarray
print(msgpack.unpackb(msgpack.packb({"a": [1, 2]})))
class S(msgspec.Struct):
    a: int
print(msgspec.json.decode(b'{"a": 5}', type=S), jiter.from_json(b'{"k": [1.5, true]}'))
print(xxhash.xxh64(b"abc").hexdigest(), bitarray.bitarray("1011").count(1))
import tomli_w, tomlkit, humanize, slugify, text_unidecode
print(tomli_w.dumps({"a": 1}).strip(), tomlkit.parse("b = 2")["b"], humanize.intcomma(1234567), slugify.slugify("Héllo Wörld"))
import sqlalchemy as sa
e = sa.create_engine("sqlite://")
with e.begin() as c:
    c.execute(sa.text("create table t (x int)")); c.execute(sa.text("insert into t values (1), (2)"))
    print(c.execute(sa.text("select sum(x) from t")).scalar())
import packaging.version, typing_extensions
print(packaging.version.Version("1.10") > packaging.version.Version("1.9"), typing_extensions.Literal)
import micropip
await micropip.install("tabulate")
try:
    await micropip.install("numpy")
except ValueError as e:
    print("refused:", "not in the wheelhouse" in str(e))
