# Invoice arithmetic in Decimal (and Fraction), where binary floats would be wrong.
from decimal import ROUND_HALF_EVEN, ROUND_HALF_UP, Decimal, InvalidOperation, getcontext, localcontext
from fractions import Fraction

getcontext().prec = 28
lines = [("Consulting", Decimal("12.5"), Decimal("96.00")), ("Licence", Decimal("3"), Decimal("199.99")),
         ("Discount", Decimal("1"), Decimal("-50.005"))]
CENT = Decimal("0.01")
subtotal = sum((qty * price for _, qty, price in lines), Decimal(0))
vat = (subtotal * Decimal("0.19")).quantize(CENT, rounding=ROUND_HALF_UP)
for name, qty, price in lines:
    print(f"{name:<12}{qty:>6} x {price:>9} = {(qty * price).quantize(CENT):>10}")
print(f"{'subtotal':<30}{subtotal.quantize(CENT):>10}")
print(f"{'VAT 19%':<30}{vat:>10}")
print(f"{'total':<30}{(subtotal + vat).quantize(CENT):>10}")
print(0.1 + 0.2, Decimal("0.1") + Decimal("0.2"), Decimal(0.1))
print([Decimal(x).quantize(Decimal("1"), rounding=ROUND_HALF_EVEN) for x in ("0.5", "1.5", "2.5", "-2.5")])
with localcontext() as ctx:
    ctx.prec = 50
    print(Decimal(1) / Decimal(7))
print(Decimal(2).sqrt(), Decimal("1e-3").as_tuple(), Decimal("NaN").is_nan())
try:
    Decimal("12,50")
except InvalidOperation as e:
    print("invalid:", type(e).__name__)
print(Fraction(3, 4) + Fraction(5, 6), Fraction("0.125"), Fraction(1, 3).limit_denominator(10))
{"total": str((subtotal + vat).quantize(CENT)), "vat": float(vat)}
