# Everything random comes from the run's seed: the same numbers in both hosts.
import os
import random
import secrets
import string
import uuid

print(random.random(), random.randint(1, 10**9), random.uniform(-1, 1))
deck = [r + s for s in "SHDC" for r in "A23456789TJQK"]
random.shuffle(deck)
print(deck[:8], random.sample(range(100), 5), random.choice(string.ascii_letters))
print(random.choices("abc", weights=[5, 1, 1], k=10), random.gauss(0, 1), random.getrandbits(64))
print(os.urandom(16).hex(), secrets.token_hex(8), secrets.token_urlsafe(12))
print(uuid.uuid4(), uuid.uuid4().hex[:8])
rng = random.Random(12345)
print([rng.randrange(1000) for _ in range(5)], random.SystemRandom().random() < 1)
password = "".join(secrets.choice(string.ascii_letters + string.digits) for _ in range(16))
{"password": password, "coin": random.choice(["heads", "tails"])}
