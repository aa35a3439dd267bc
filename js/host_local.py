"""host_local.py — the host half of the local executor (`--executor local`): runs one job in host
CPython, with the user's rights, files, network and installed packages. NOT a sandbox.

mcp-code-mode starts `python3 -u -c BOOT` in a process group of its own, stdin /dev/null, stdout
and stderr piped (capped by the parent), and fd 3 a Unix socket. BOOT reads one JSON line from fd 3,
`{"host": <this file>, "codemode": <js/codemode.py>, "job": {...}, "seed": n | null}`, and runs this
file as `<codemode>` (so tracebacks leave its frames out, as they do codemode.py's).

Over fd 3, one JSON object a line:
  to the parent    {"op": "catalog" | "server_tools" | "ready" | "call", "id": n, ...}
                   {"op": "outcome", "report": <codemode.run_job's JSON>}
  from the parent  {"id": n, "value": <string>}

This file supplies what Pyodide supplies in the sandbox: `_codemode_host` (the same four functions
as runner.js registers) and stand-ins for `pyodide.ffi`'s `run_sync` / `can_run_sync`, so
codemode.py runs here unchanged.
"""

import asyncio
import concurrent.futures
import json
import os
import signal
import sys
import threading
import types


class _Pending(concurrent.futures.Future):
    """A reply from the parent: blocked on by a plain call (`run_sync`), or awaited."""

    def __await__(self):
        return (yield from asyncio.wrap_future(self).__await__())


class _Channel:
    def __init__(self, sock, reader):
        self._sock = sock
        self._reader = reader
        self._lock = threading.Lock()
        self._next = 0
        self._waiting = {}
        threading.Thread(target=self._read, name="codemode-channel", daemon=True).start()

    def send(self, message):
        data = (json.dumps(message, ensure_ascii=False) + "\n").encode("utf-8", "surrogatepass")
        with self._lock:
            self._sock.sendall(data)

    def request(self, op, **fields):
        pending = _Pending()
        with self._lock:
            self._next += 1
            ident = self._next
            self._waiting[ident] = pending
        self.send({"op": op, "id": ident, **fields})
        return pending

    def _read(self):
        for line in self._reader:
            reply = json.loads(line)
            pending = self._waiting.pop(reply["id"], None)
            if pending is not None:
                pending.set_result(reply["value"])
        # The parent is gone (or closed the channel): nothing of this job may outlive it.
        try:
            os.killpg(0, signal.SIGKILL)
        finally:
            os._exit(1)


def _host_module(channel):
    host = types.ModuleType("_codemode_host")
    host.call_tool = lambda server, tool, args_json: channel.request(
        "call", server=server, tool=tool, args=args_json)
    host.catalog_json = lambda: channel.request("catalog").result()
    host.server_tools_json = lambda server: channel.request("server_tools", server=server).result()
    host.server_ready = lambda server: channel.request("ready", server=server)
    return host


def run_sync(pending):
    """pyodide.ffi.run_sync: here a plain call blocks this thread until the reply comes (the
    channel's reader thread delivers it), even inside a running event loop."""
    return pending.result()


def can_run_sync():
    return True


def _load_codemode(source):
    stand_ins = {
        "pyodide": types.ModuleType("pyodide"),
        "pyodide.ffi": types.ModuleType("pyodide.ffi"),
    }
    stand_ins["pyodide.ffi"].run_sync = run_sync
    stand_ins["pyodide.ffi"].can_run_sync = can_run_sync
    saved = {name: sys.modules.get(name) for name in stand_ins}
    sys.modules.update(stand_ins)
    try:
        module = types.ModuleType("codemode")
        module.__file__ = "<codemode>"
        sys.modules["codemode"] = module
        exec(compile(source, "<codemode>", "exec"), module.__dict__)
    finally:
        # A script's own `import pyodide` must not find our stand-ins.
        for name, previous in saved.items():
            if previous is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = previous
    return module


def main(sock, reader, hello):
    sock.set_inheritable(False)  # not handed to processes the script starts
    channel = _Channel(sock, reader)
    sys.modules["_codemode_host"] = _host_module(channel)
    codemode = _load_codemode(hello["codemode"])
    if hello.get("seed") is not None:
        import random

        random.seed(hello["seed"])
    sys.argv = [hello["job"].get("filename") or "<script>"]
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    report = loop.run_until_complete(codemode.run_job(json.dumps(hello["job"])))
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass
    channel.send({"op": "outcome", "report": report})
    # Threads or tasks the script left behind end with the process, as they do with a sandbox.
    os._exit(0)


main(_sock, _reader, _hello)  # noqa: F821 (given by BOOT)
