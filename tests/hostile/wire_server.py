"""A misbehaving MCP server over raw JSON-RPC (stdio): each tool answers its call in a way the
transport cannot read (too large, too deep, not UTF-8, not JSON-RPC), its tool list holds tools
with broken schemas next to good ones, and it can flood notifications or paginate forever.

Usage: wire_server.py [endless]   (endless: tools/list always returns another nextCursor)"""

import json
import sys

from jsonrpc import send, send_raw, serve

ENDLESS = "endless" in sys.argv[1:]

def deep(levels):
    value = "bottom"
    for _ in range(levels):
        value = {"d": value}
    return value


def answer_call(rid, params):
    name = params["name"]
    ok = lambda text: {"jsonrpc": "2.0", "id": rid, "result": {"content": [{"type": "text", "text": text}]}}
    if name == "ok":
        send(ok("fine"))
    elif name == "huge":  # one 20 MB line, the id at its end as the TypeScript SDK writes it
        body = json.dumps({"content": [{"type": "text", "text": "x" * 20_000_000}]})
        send_raw(('{"result":' + body + ',"jsonrpc":"2.0","id":' + json.dumps(rid) + "}").encode())
    elif name == "deep":
        send({"jsonrpc": "2.0", "id": rid, "result": {"content": [], "structuredContent": deep(140)}})
    elif name == "badutf8":
        send_raw(b'{"jsonrpc":"2.0","id":' + json.dumps(rid).encode() +
                 b',"result":{"content":[{"type":"text","text":"bad \xff\xfe bytes"}]}}')
    elif name == "noresult":
        send({"jsonrpc": "2.0", "id": rid})
    elif name == "both":
        send({"jsonrpc": "2.0", "id": rid, "result": {"content": []}, "error": {"code": 1, "message": "and"}})
    elif name == "errnomsg":
        send({"jsonrpc": "2.0", "id": rid, "error": {"code": -32000}})
    elif name == "v1":
        send({"jsonrpc": "1.0", "id": rid, "result": {"content": []}})
    elif name == "nullid":
        send({"jsonrpc": "2.0", "id": None, "error": {"code": -32000, "message": "lost track"}})
    elif name == "storm":  # 2,000 list_changed notifications at once
        for _ in range(2000):
            send({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
        send(ok("stormed"))
    else:
        send({"jsonrpc": "2.0", "id": rid, "error": {"code": -32602, "message": f"no tool {name}"}})


GOOD = ["ok", "huge", "deep", "badutf8", "noresult", "both", "errnomsg", "v1", "nullid", "storm"]


def tool_list(params):
    tools = [{"name": n, "inputSchema": {"type": "object", "properties": {}}} for n in GOOD]
    tools += [
        {"name": "schema_is_a_string", "inputSchema": "object"},
        {"name": "schema_too_deep", "inputSchema": {"type": "object", "properties": {"x": deep(70)}}},
        {"name": "n" * 200, "inputSchema": {"type": "object"}},
        {"name": 42, "inputSchema": {"type": "object"}},
        "not a tool at all",
    ]
    result = {"tools": tools}
    if ENDLESS:
        cursor = int(params.get("cursor") or 0)
        result = {"tools": [{"name": f"page{cursor}", "inputSchema": {"type": "object"}}],
                  "nextCursor": str(cursor + 1)}
    return result


serve("hostile-wire", tool_list, answer_call, list_changed=True)
