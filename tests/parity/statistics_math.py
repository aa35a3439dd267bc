# Numeric work: statistics, math, float representation and exact integer arithmetic.
import math
import statistics

samples = [2.5, 3.1, 4.7, 4.7, 5.0, 6.2, 7.9, 8.1, 9.4, 12.0]
print(statistics.mean(samples), statistics.median(samples), statistics.mode(samples))
print(statistics.pstdev(samples), statistics.stdev(samples), statistics.quantiles(samples, n=4))
print(statistics.correlation(samples, [x * 2 + 1 for x in samples]), statistics.linear_regression(range(10), samples))
print(math.fsum([0.1] * 10), sum([0.1] * 10), math.isclose(sum([0.1] * 10), 1))
print(math.sqrt(2), math.pi, math.e, math.tau, math.inf, -math.inf, math.nan)
print(math.gcd(2**64, 6**20), math.lcm(21, 6), math.comb(52, 5), math.perm(10, 3), math.factorial(25))
print(math.log(1e300), math.log2(3), math.log10(0.001), math.exp(700), math.atan2(1, -1), math.hypot(3, 4, 12))
print(repr(1 / 3), 1e16, 1e-5, 123456789.123456789, 2.0**0.5, round(2.675, 2), round(-0.5), float("1e309"))
print(7 // -2, -7 % 3, divmod(-17, 5), 2**-1, (-8) ** (1 / 3))
print(len(str(3**5000)), (3**1000) % 10**20, int("9" * 200) // 7 % 1000)
print((0.1).hex(), float.fromhex("0x1.8p1"), (1.5).as_integer_ratio(), math.ulp(1.0), math.nextafter(1, 2))
{"summary": {"n": len(samples), "mean": statistics.mean(samples), "var": statistics.variance(samples)}}
