# Emscripten's runtime string is the browser's user agent, and UNKNOWN in the V8 host (which has no
# navigator). With --no-snapshot each host reports its own; a restored snapshot carries V8's.
import sys

print(sys._emscripten_info.runtime)
