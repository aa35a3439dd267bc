# A print flood past the 1 MiB cap: both hosts keep the same first bytes and add the same notice.
import sys

for i in range(40000):
    print(f"row {i:06d} " + "x" * 32)
for i in range(30000):
    print(f"warning {i}: something odd " + "y" * 20, file=sys.stderr)
print("the end")
