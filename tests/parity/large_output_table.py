# A large report that stays under the cap: a 5,000-row table, printed line by line and in one go.
rows = [(i, f"item-{i:05d}", (i * 7919) % 10007, round(i ** 0.5, 6)) for i in range(5000)]
for r in rows[:2500]:
    print(f"{r[0]:>5} {r[1]:<12} {r[2]:>6} {r[3]:>12.6f}")
print("\n".join(f"{a}|{b}|{c}|{d}" for a, b, c, d in rows[2500:]))
print("=" * 80)
print(f"{len(rows)} rows, checksum {sum(r[2] for r in rows)}")
