# A runaway loop: both hosts keep what it printed, stop it at --timeout and say so the same way
# (the browser host stops it by terminating the worker Pyodide runs in).
print("working", flush=True)
while True:
    pass
