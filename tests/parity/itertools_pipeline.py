# Lazy data pipelines with itertools and functools, as agents write to reshape tool output.
import functools
import itertools
import operator

readings = [("s1", 3), ("s1", 5), ("s2", 2), ("s2", 2), ("s2", 9), ("s3", 1), ("s1", 4)]
for sensor, group in itertools.groupby(sorted(readings), key=operator.itemgetter(0)):
    values = [v for _, v in group]
    print(sensor, values, list(itertools.accumulate(values)), max(values))

print(list(itertools.batched(range(10), 4)))
print(list(itertools.pairwise("ABCD")), list(itertools.islice(itertools.cycle("xy"), 5)))
print(list(itertools.combinations([1, 2, 3, 4], 2))[:4], len(list(itertools.permutations(range(5), 3))))
print(list(itertools.product("ab", repeat=2)), list(itertools.zip_longest("abc", [1], fillvalue="-")))
print(list(itertools.chain.from_iterable([[1], [2, 3], []])), list(itertools.compress("abcdef", [1, 0, 1, 0, 1, 1])))


@functools.lru_cache(maxsize=None)
def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)


print(fib(150), fib.cache_info())
print(functools.reduce(operator.mul, range(1, 21)), sorted(["b10", "a2", "b9"], key=functools.cmp_to_key(
    lambda a, b: (a[0] > b[0]) - (a[0] < b[0]) or int(a[1:]) - int(b[1:]))))
partial_pow = functools.partial(pow, 2)
print([partial_pow(k) for k in range(8)], functools.partial(int, base=16)("ff"))
{"windows": [list(w) for w in zip(*(itertools.islice(range(6), i, None) for i in range(3)))]}
