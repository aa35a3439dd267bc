"""The JSON-RPC loop the hostile servers share: MCP over stdio, one JSON object per line, with
nothing of the Python SDK between the test and the bytes it sends (so it can send bad ones)."""

import json
import sys

_out = sys.stdout.buffer


def send_raw(data: bytes):
    _out.write(data + b"\n")
    _out.flush()


def send(message):
    send_raw(json.dumps(message).encode())


def text_result(text):
    return {"content": [{"type": "text", "text": text}]}


def serve(name, list_tools, call_tool, list_changed=False):
    """Answers initialize, then tools/list with `list_tools(params)` (a result) and tools/call
    with `call_tool(rid, params)`: a result to send, or None when it sent the answer itself."""
    for line in sys.stdin:
        request = json.loads(line)
        method, rid = request.get("method"), request.get("id")
        if rid is None:
            continue  # a notification
        params = request.get("params") or {}
        if method == "initialize":
            send({"jsonrpc": "2.0", "id": rid, "result": {
                "protocolVersion": params.get("protocolVersion", "2025-11-25"),
                "capabilities": {"tools": {"listChanged": list_changed}},
                "serverInfo": {"name": name, "version": "1.0"}}})
        elif method == "tools/list":
            send({"jsonrpc": "2.0", "id": rid, "result": list_tools(params)})
        elif method == "tools/call":
            result = call_tool(rid, params)
            if result is not None:
                send({"jsonrpc": "2.0", "id": rid, "result": result})
        else:
            send({"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": f"no method {method}"}})
