# Memory grows until the --memory-mb cap: both hosts refuse at the same point with MemoryError
# (the browser host routes Pyodide's streamed wasm through runner.js's capped instantiate).
chunks = []
try:
    while True:
        chunks.append(bytearray(16 * 2**20))
except MemoryError:
    n = len(chunks)
    chunks.clear()
    print("MemoryError after", n, "chunks")
