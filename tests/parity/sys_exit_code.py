# sys.exit with a non-zero status after printing: output is kept, the status is reported.
import sys

print("checking inputs")
print("2 problems found", file=sys.stderr)
sys.exit(3)
