# Emscripten derives LANG from navigator.language: en_US.UTF-8 in Chromium, C.UTF-8 in the V8 host.
import locale
import os

print(os.environ["LANG"], locale.getlocale())
