# The wall clock moves between the two runs: named "wall clock", still a difference.
import datetime

print(datetime.datetime.now(datetime.timezone.utc).isoformat())
