# stderr from logging and warnings, interleaved with stdout.
import logging
import sys
import warnings

logging.basicConfig(stream=sys.stderr, level=logging.DEBUG, format="%(levelname)s %(name)s: %(message)s")
log = logging.getLogger("agent")
print("step 1")
log.info("loaded %d records", 42)
warnings.warn("the 'limit' argument is deprecated", DeprecationWarning, stacklevel=1)
warnings.warn("falling back to defaults")
print("step 2")
log.warning("slow response: %.1f s", 2.5)
try:
    1 / 0
except ZeroDivisionError:
    log.exception("could not compute ratio")
print("step 3", file=sys.stderr)
logging.getLogger("agent.child").debug("nested logger")
"ok"
