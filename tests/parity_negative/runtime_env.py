# Pyodide's own idea of its host differs (a browser worker vs a shell-like isolate): a real
# difference with no inherent explanation, reported as DIFFERENT.
import pyodide_js

env = pyodide_js._api.runtimeEnv
print("IN_BROWSER", env.IN_BROWSER, "IN_SHELL", env.IN_SHELL)
