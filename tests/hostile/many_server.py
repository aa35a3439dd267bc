"""A well-formed MCP server over raw JSON-RPC with very many tools (argv[1], default 10,000),
each with a small schema of its own, listed in pages of 1,000: the catalogue a big deployment
adds up to. A call answers with the tool's name and its arguments."""

import json
import sys

from jsonrpc import serve, text_result

COUNT = int(sys.argv[1]) if len(sys.argv) > 1 else 10_000
PAGE = 1_000


def tool(i):
    return {"name": f"tool-{i}", "description": f"Tool number {i}. Looks up item {i} by key.",
            "inputSchema": {"type": "object", "additionalProperties": False, "required": ["key"],
                            "properties": {"key": {"type": "string"}, "limit": {"type": "integer"},
                                           "mode": {"enum": ["fast", "exact"]}}}}


def list_tools(params):
    start = int(params.get("cursor") or 0)
    result = {"tools": [tool(i) for i in range(start, min(start + PAGE, COUNT))]}
    if start + PAGE < COUNT:
        result["nextCursor"] = str(start + PAGE)
    return result


serve("many", list_tools,
      lambda rid, params: text_result(json.dumps({"tool": params["name"], "arguments": params.get("arguments")})))
