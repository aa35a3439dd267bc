# hash() and the iteration order of sets of strings depend on the hash seed: both hosts must agree.
words = ["apple", "banana", "cherry", "date", "elderberry", "fig", "grape", "honeydew"]
print(hash("apple"), hash(b"bytes"), hash(("a", 1)), hash(1.5), hash(10**30))
print(list(set(words)))
print(list({w[:2] for w in words} | {"zz", "aa"}))
print(frozenset("mississippi"))
groups = {}
for w in words:
    groups.setdefault(len(w) % 3, set()).add(w)
print({k: sorted(v) for k, v in sorted(groups.items())}, [list(v) for v in groups.values()])
print(sorted(words, key=hash)[:3])
{"order": list(set(words))}
