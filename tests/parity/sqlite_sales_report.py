# An in-memory SQLite database: schema, bulk insert, joins, aggregates, window functions.
import sqlite3

con = sqlite3.connect(":memory:")
con.row_factory = sqlite3.Row
con.executescript("""
CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT NOT NULL, country TEXT);
CREATE TABLE orders (id INTEGER PRIMARY KEY, customer_id INTEGER REFERENCES customers(id),
                     amount REAL, placed TEXT);
""")
con.executemany("INSERT INTO customers(name, country) VALUES (?, ?)",
                [("Ada", "UK"), ("Linus", "FI"), ("Grace", "US"), ("Yukihiro", "JP"), ("Zoë", "FR")])
orders = [(1 + i % 5, round(10 + (i * 37) % 250 + 0.99, 2), f"2026-{1 + i % 12:02d}-{1 + i % 28:02d}") for i in range(60)]
con.executemany("INSERT INTO orders(customer_id, amount, placed) VALUES (?, ?, ?)", orders)

rows = con.execute("""
    SELECT c.name, c.country, COUNT(o.id) AS n, ROUND(SUM(o.amount), 2) AS total,
           RANK() OVER (ORDER BY SUM(o.amount) DESC) AS rank
    FROM customers c LEFT JOIN orders o ON o.customer_id = c.id
    GROUP BY c.id ORDER BY rank
""").fetchall()
for r in rows:
    print(f"{r['rank']}. {r['name']:<9} {r['country']} {r['n']:>3} orders {r['total']:>9.2f}")
monthly = con.execute("SELECT substr(placed, 1, 7) AS month, ROUND(AVG(amount), 3) FROM orders GROUP BY month ORDER BY month LIMIT 4").fetchall()
print([tuple(m) for m in monthly])
try:
    con.execute("INSERT INTO customers(name) VALUES (NULL)")
except sqlite3.IntegrityError as e:
    print("IntegrityError:", e)
print(con.execute("SELECT json_object('n', COUNT(*), 'max', MAX(amount)) FROM orders").fetchone()[0])
print(sqlite3.sqlite_version_info >= (3, 0, 0))
{"customers": [dict(r) for r in rows][:2]}
