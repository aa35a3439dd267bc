"""Drives `mcp-code-mode serve` with a real MCP client (PyPI `mcp`), one named check per run.

usage: python3 checks.py BIN CHECK --mode auto|legacy [--transport stdio|http] [--executor local]

Starts our server (over stdio, or `serve --http` on a free loopback port with a bearer token) with a config (Claude Desktop form, `${VAR}` expansion) naming three
real servers from tests/fixtures: filesystem (over a fresh data folder), memory, everything.
Prints `ok: CHECK (mode, protocol)` and exits 0 when the check passes; anything else is a failure.
"""

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import create_mcp_http_client, streamable_http_client

HERE = Path(__file__).resolve().parent
MODULES = HERE.parent / "fixtures" / "node_modules" / "@modelcontextprotocol"
HOSTILE = HERE.parent / "hostile"
# check_many: this many servers of 10,000 tools each.
MANY_SERVERS = 5
# check_many: the most our server process may hold at its peak with those 50,000 tools, in MiB.
MANY_PEAK_MIB = 1024


class CheckFailed(Exception):
    pass


def expect(condition, message):
    if not condition:
        raise CheckFailed(message)


# A real server on the official TypeScript SDK (from tests/fixtures) whose `add-tool` registers a
# tool at run time, so the SDK sends notifications/tools/list_changed.
CHANGER_JS = """
const { McpServer } = require("@modelcontextprotocol/sdk/server/mcp.js");
const { StdioServerTransport } = require("@modelcontextprotocol/sdk/server/stdio.js");
const { z } = require("zod");
const server = new McpServer({ name: "changer", version: "1.0.0" });
server.registerTool("add-tool", { description: "Registers a tool called `name`", inputSchema: { name: z.string() } },
  async ({ name }) => {
    server.registerTool(name, { description: "added at run time" },
      async () => ({ content: [{ type: "text", text: `${name} works` }] }));
    return { content: [{ type: "text", text: "added" }] };
  });
server.connect(new StdioServerTransport());
"""


# A server that takes 2 s before it answers anything, and one that never answers (as a config typo
# that leaves `node` reading a script from stdin would).
LATE_JS = """
const { McpServer } = require("@modelcontextprotocol/sdk/server/mcp.js");
const { StdioServerTransport } = require("@modelcontextprotocol/sdk/server/stdio.js");
const server = new McpServer({ name: "late", version: "1.0.0" });
server.registerTool("hello", { description: "Says hello" },
  async () => ({ content: [{ type: "text", text: "hello from late" }] }));
setTimeout(() => server.connect(new StdioServerTransport()), 2000);
"""


def setup(tmp: Path, with_changer=False, with_starting=False, with_many=False):
    data = tmp / "data"
    (data / "notes").mkdir(parents=True)
    (data / "notes" / "alpha.txt").write_text("alpha line one\nalpha line two\n")
    (data / "notes" / "beta.txt").write_text("beta has one line\n")
    (data / "notes" / "gamma.md").write_text("# gamma\n\nthree\nlines\n")
    config = {
        "mcpServers": {
            "filesystem": {
                "command": "node",
                "args": [str(MODULES / "server-filesystem/dist/index.js"), "${TEST_DATA_DIR}"],
                "description": "Files under the test data folder",
                # These checks' client cannot be asked (no elicitation): its scripts write unasked.
                "policy": {"write_file": "allow"},
            },
            "memory": {
                "command": "node",
                "args": [str(MODULES / "server-memory/dist/index.js")],
                "env": {"MEMORY_FILE_PATH": "${TEST_MEMORY_FILE}"},
            },
            "everything": {"command": "node", "args": [str(MODULES / "server-everything/dist/index.js"), "stdio"]},
        }
    }
    if with_changer:
        (tmp / "changer.cjs").write_text(CHANGER_JS)
        config["mcpServers"]["changer"] = {
            "command": "node",
            "args": [str(tmp / "changer.cjs")],
            "env": {"NODE_PATH": str(MODULES.parent)},
            "policy": "allow",  # its tools have no annotations, so they would ask
        }
    if with_starting:
        (tmp / "late.cjs").write_text(LATE_JS)
        config["mcpServers"]["late"] = {
            "command": "node",
            "args": [str(tmp / "late.cjs")],
            "env": {"NODE_PATH": str(MODULES.parent)},
            "policy": "allow",
        }
        config["mcpServers"]["hung"] = {"command": "node", "args": [], "timeout_s": 3}
    if with_many:
        for i in range(MANY_SERVERS):
            config["mcpServers"][f"big{i}"] = {"command": sys.executable, "args": [str(HOSTILE / "many_server.py")], "policy": "allow"}
    config_path = tmp / "servers.json"
    config_path.write_text(json.dumps(config, indent=2))
    env = dict(os.environ, TEST_DATA_DIR=str(data.resolve()), TEST_MEMORY_FILE=str(tmp / "memory.jsonl"))
    env.setdefault("MCP_CODE_MODE_LOG", "warn")
    return data.resolve(), config_path, env


async def execute(client, code, progress_callback=None, **extra):
    result = await client.call_tool("execute_code", {"code": code, **extra}, progress_callback=progress_callback)
    report = result.structured_content
    expect(isinstance(report, dict), f"execute_code returned no structured content: {result}")
    for key in ("stdout", "stderr", "result", "error", "tool_calls", "duration_ms", "execution_id"):
        expect(key in report, f"report lacks {key!r}: {report}")
    expect(bool(result.is_error) == (report["error"] is not None), f"isError disagrees with error: {result}")
    text = "".join(getattr(c, "text", "") for c in result.content)
    if len(json.dumps(report)) <= 8 * 1024:
        expect(json.loads(text) == report, "the text copy differs from structuredContent")
    else:  # a big report is not sent twice: the text is a summary
        expect(len(text) < 8 * 1024 and text.startswith("The full report ("), f"text content of a big report: {text[:300]!r}")
    return report


def ok(report):
    expect(report["error"] is None, f"script failed: {json.dumps(report, indent=1)}")
    return report


# ---- checks ---------------------------------------------------------------------------------


async def check_catalog(client, data, tmp):
    listed = await client.list_tools()
    by_name = {t.name: t for t in listed.tools}
    expect({"execute_code", "list_tools", "search_tools", "get_tool_signatures"} <= set(by_name), f"tools: {sorted(by_name)}")
    ex = by_name["execute_code"]
    expect(ex.output_schema and "stdout" in ex.output_schema.get("properties", {}), f"outputSchema: {ex.output_schema}")
    for server in ("filesystem", "memory", "everything"):
        expect(f"- {server} (" in ex.description, f"execute_code's description lacks {server}: {ex.description}")
    text = lambda r: "".join(getattr(c, "text", "") for c in r.content)
    listing = text(await client.call_tool("list_tools", {"server": "filesystem"}))
    expect("tools.filesystem.read_text_file" in listing, listing)
    found = text(await client.call_tool("search_tools", {"query": "sum numbers", "detail": "signature"}))
    expect(found.splitlines()[0].startswith("tools.everything.get_sum(*, a: float, b: float"), found)
    sig = await client.call_tool("get_tool_signatures", {"names": ["filesystem.read_text_file", "everything.get-sum"]})
    expect(not sig.is_error and "def read_text_file(*, path: str" in text(sig) and 'MCP name: "get-sum"' in text(sig), text(sig))
    bad = await client.call_tool("get_tool_signatures", {"names": ["filesystem.read_txt_file"]})
    expect(bad.is_error and "did you mean filesystem.read_text_file?" in text(bad), text(bad))
    # One unknown name among found ones is a partial answer, not an error.
    part = await client.call_tool("get_tool_signatures", {"names": ["memory.create_entities", "nope.nothing"]})
    expect(not part.is_error and text(part).startswith("# 1 of 2 found; not found: nope.nothing"), text(part))
    # Nested shapes are spelled out, so an agent need not guess the inner keys.
    expect("entities: list[Entity]" in text(part)
           and "Entity = {name: str, entityType: str, observations: list[str]}" in text(part), text(part))


async def check_workflow(client, data, tmp):
    code = f"""
root = {str(data / "notes")!r}
listing = tools.filesystem.list_directory(path=root)
names = sorted(line.split("] ", 1)[1] for line in listing["content"].splitlines() if line.startswith("[FILE]"))
lines = {{}}
for name in names:
    body = tools.filesystem.read_text_file(path=f"{{root}}/{{name}}")["content"]
    lines[name] = len(body.splitlines())
summary = "\\n".join(f"{{n}}: {{c}} lines" for n, c in lines.items()) + "\\n"
tools.filesystem.write_file(path=f"{{root}}/SUMMARY.txt", content=summary)
check = tools.filesystem.read_text_file(path=f"{{root}}/SUMMARY.txt")["content"]
print(check, end="")
{{"files": names, "lines": lines, "same": check == summary}}
"""
    report = ok(await execute(client, code))
    expect(report["result"] == {"files": ["alpha.txt", "beta.txt", "gamma.md"], "lines": {"alpha.txt": 2, "beta.txt": 1, "gamma.md": 4}, "same": True}, report["result"])
    on_disk = (data / "notes" / "SUMMARY.txt").read_text()
    expect(on_disk == "alpha.txt: 2 lines\nbeta.txt: 1 lines\ngamma.md: 4 lines\n", repr(on_disk))
    expect(report["stdout"] == on_disk, report["stdout"])
    calls = [(c["server"], c["tool"], c["ok"]) for c in report["tool_calls"]]
    expect(calls[0] == ("filesystem", "list_directory", True) and len(calls) == 6, calls)


async def check_structured(client, data, tmp):
    report = ok(await execute(client, "w = tools.everything.get_structured_content(location='Chicago')\n(type(w).__name__, sorted(w))"))
    expect(report["result"][0] == "dict" and "temperature" in report["result"][1], report["result"])
    report = ok(await execute(client, "import asyncio\nr = await asyncio.gather(tools.everything.get_sum.aio(a=2, b=3), tools.memory.read_graph.aio())\nr"))
    expect(report["result"][0] == "The sum of 2 and 3 is 5." and "entities" in report["result"][1], report["result"])


async def check_dashed(client, data, tmp):
    report = ok(await execute(client, "s = tools.everything.get_sum(a=20, b=22)\nm = tools.everything.get_sum.mcp_name\n(s, m)"))
    expect(report["result"] == ["The sum of 20 and 22 is 42.", "get-sum"], report["result"])


async def check_errors(client, data, tmp):
    report = await execute(client, "x = 1\ny = x / 0")
    expect(report["error"]["type"] == "ZeroDivisionError" and 'line 2' in report["error"]["traceback"], report["error"])
    code = "try:\n    tools.filesystem.read_text_file(path='/etc/passwd')\nexcept ToolError as e:\n    caught = (e.server, e.tool, e.message)\ncaught"
    report = ok(await execute(client, code))
    server, tool, message = report["result"]
    expect((server, tool) == ("filesystem", "read_text_file") and "denied" in message.lower(), report["result"])
    expect(report["tool_calls"][0]["ok"] is False, report["tool_calls"])
    report = await execute(client, "tools.filesystem.read_txt_file(path='x')")
    expect(report["error"]["type"] == "AttributeError" and "read_text_file" in report["error"]["message"], report["error"])
    report = await execute(client, "tools.filesytem")
    expect("Did you mean: filesystem" in report["error"]["message"], report["error"])
    expect(report["error"]["message"].lower().count("did you mean") == 1, f"suggested twice: {report['error']}")
    expect(report["error"]["traceback"].lower().count("did you mean") == 1, f"suggested twice: {report['error']}")
    # A mistyped keyword is refused (it used to be passed on and ignored), naming the right one,
    # and the traceback ends at the user's line, not inside the bridge.
    report = await execute(client, f"tools.filesystem.read_text_file(path={str(data / 'notes' / 'alpha.txt')!r}, heads=1)")
    error = report["error"]
    expect(error["type"] == "TypeError" and "'heads'; did you mean 'head'?" in error["message"], error)
    expect(report["tool_calls"] == [] and "<codemode>" not in error["traceback"], report)
    report = await execute(client, "tools.filesystem.read_text_file(file='x')")
    expect("unexpected keyword argument 'file'" in report["error"]["message"], report["error"])


async def check_progress(client, data, tmp):
    seen = []

    async def on_progress(progress, total, message):
        seen.append((progress, message))

    code = "import asyncio\nfor i in range(3):\n    tools.everything.get_sum(a=i, b=1)\n    await asyncio.sleep(0.05)\n'done'"
    report = ok(await execute(client, code, progress_callback=on_progress))
    expect(report["result"] == "done", report)
    await anyio.sleep(0.2)
    calls = [m for _, m in seen if m and "everything.get-sum" in m]
    expect(len(calls) == 3, f"progress: {seen}")
    values = [p for p, _ in seen]
    expect(values == sorted(values) and len(set(values)) == len(values), f"progress must increase: {seen}")


def downstream_pids(marker):
    out = subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


async def check_kill_downstream(client, data, tmp):
    marker = "server-everything/dist/index.js"
    code = """
import asyncio
tools.everything.echo(message="about to start")      # tells the test (via progress) we are here
try:
    tools.everything.trigger_long_running_operation(duration=8, steps=8)   # killed while in flight
    during = "ok"
except ToolError as e:
    during = e.message
after = None
for attempt in range(60):           # the server is restarted with backoff
    try:
        after = tools.everything.get_sum(a=1, b=2)
        break
    except ToolError:
        await asyncio.sleep(0.25)
(during, after)
"""
    started = anyio.Event()

    async def on_progress(progress, total, message):
        if message and "everything.echo" in message:
            started.set()

    async with anyio.create_task_group() as tg:
        result = {}

        async def run():
            result["report"] = await execute(client, code, progress_callback=on_progress, timeout_s=40)

        tg.start_soon(run)
        with anyio.fail_after(30):
            await started.wait()
        await anyio.sleep(1.0)  # the long operation is now in flight
        pids = downstream_pids(marker)
        expect(pids, "no everything server process found")
        for pid in pids:
            os.kill(pid, signal.SIGKILL)
    report = ok(result["report"])
    during, after = report["result"]
    expect(during != "ok" and "everything" in during, f"the call in flight should fail clearly: {during!r}")
    expect("3" in json.dumps(after), f"a call after the restart should work: {report}")
    calls = [(c["tool"], c["ok"]) for c in report["tool_calls"]]
    expect(calls[1] == ("trigger-long-running-operation", False) and calls[-1] == ("get-sum", True), calls)


async def check_cancel(client, data, tmp):
    tick = data / "tick.txt"
    code = f"""
import asyncio
i = 0
while True:
    i += 1
    tools.filesystem.write_file(path={str(tick)!r}, content=str(i))
    await asyncio.sleep(0.1)
"""
    async with anyio.create_task_group() as tg:
        async def endless():
            await execute(client, code, timeout_s=60)
            raise CheckFailed("the endless script returned")

        tg.start_soon(endless)
        with anyio.fail_after(30):  # the script is running once it has written a few ticks
            while not (tick.exists() and tick.read_text().isdigit() and int(tick.read_text()) >= 3):
                await anyio.sleep(0.1)
        tg.cancel_scope.cancel()  # the client sends notifications/cancelled
    await anyio.sleep(0.6)
    before = tick.read_text()
    await anyio.sleep(1.0)
    after = tick.read_text()
    expect(int(before) >= 3, f"the script should have run before the cancel: {before}")
    expect(before == after, f"the script kept running after notifications/cancelled: {before} -> {after}")
    report = ok(await execute(client, "'still serving'"))
    expect(report["result"] == "still serving", report)


async def check_concurrent(client, data, tmp):
    # The slow script can only finish once the fast one has run: if executions were serialized,
    # the slow one would wait for a file nobody writes and time out. No wall-clock threshold,
    # so a loaded machine cannot make this flaky.
    go = data / "go.txt"
    go.unlink(missing_ok=True)
    slow_code = f"""
import asyncio
while "[FILE] go.txt" not in tools.filesystem.list_directory(path={str(data)!r})["content"]:
    await asyncio.sleep(0.1)
'slow'
"""
    results = {}

    async def run(name, code):
        results[name] = ok(await execute(client, code, timeout_s=60))["result"]

    async with anyio.create_task_group() as tg:
        tg.start_soon(run, "slow", slow_code)
        await anyio.sleep(0.3)
        tg.start_soon(run, "fast", f"tools.filesystem.write_file(path={str(go)!r}, content='go')\nsum(range(100))")
    expect(results == {"fast": 4950, "slow": "slow"}, f"a fast script should run beside a slow one: {results}")


async def check_limits(client, data, tmp):
    report = await execute(client, "while True: pass", timeout_s=1)
    expect(report["error"]["type"] == "TimeoutError", report["error"])
    bad = await client.call_tool("execute_code", {"code": "1", "timeout_s": -5})
    expect(bad.is_error and "timeout_s" in "".join(c.text for c in bad.content), bad)
    # A 5 MB result is capped like stdout (the server's --max-output, 1 MiB), with a notice; the
    # report shows its start (--inline-bytes) and links to the capped whole.
    report = ok(await execute(client, "'x' * 5_000_000"))
    expect(isinstance(report["result"], str) and len(report["result"]) < 20_000
           and report["result"].endswith("more bytes)"), report["result"][-300:])
    [cut] = report["truncated"]
    pages = [(await client.read_resource(f"{cut['uri']}?page={n}")).contents[0].text for n in range(1, cut["pages"] + 1)]
    whole = json.loads("".join(pages))
    expect(isinstance(whole, str) and len(whole) < 1_100_000
           and "[mcp-code-mode: result truncated: its JSON is 5000002 bytes" in whole, whole[-300:])


async def check_list_changed(client, data, tmp):
    # The client's message handler (installed in main) records notifications from our server.
    description = lambda tools: next(t.description for t in tools.tools if t.name == "execute_code")
    before = description(await client.list_tools())
    expect("- changer (1 tools)" in before, before)
    NOTIFICATIONS.clear()
    report = ok(await execute(client, "tools.changer.add_tool(name='fresh-tool')"))
    expect(report["result"] == "added", report)
    with anyio.fail_after(10):
        while "notifications/tools/list_changed" not in NOTIFICATIONS:
            await anyio.sleep(0.05)
    after = description(await client.list_tools())
    expect("- changer (2 tools)" in after and "fresh_tool" in after, after)
    report = ok(await execute(client, "tools.changer.fresh_tool()"))
    expect(report["result"] == "fresh-tool works", report)


async def check_starting(client, data, tmp):
    # main() measured the handshake and did not wait for the servers; `hung` never answers.
    expect(CONNECT_SECONDS[0] < 10.0, f"initialize took {CONNECT_SECONDS[0]:.1f} s while a server hangs")
    description = lambda tools: next(t.description for t in tools.tools if t.name == "execute_code")
    first = description(await client.list_tools())
    expect("- hung: starting" in first, first)
    started = time.monotonic()
    report = ok(await execute(client, "print(1)"))
    took = time.monotonic() - started
    # Generous bound for a loaded machine: the failure this guards against is the 30 s init timeout.
    expect(report["stdout"] == "1\n" and took < 10.0, f"print(1) took {took:.1f} s while a server hangs: {report}")
    # A call to a server still starting waits for it (bounded by its timeout_s), then runs.
    report = ok(await execute(client, "tools.late.hello()"))
    expect(report["result"] == "hello from late", report)
    with anyio.fail_after(10):  # its coming up changed the catalogue: the client is told
        while "notifications/tools/list_changed" not in NOTIFICATIONS:
            await anyio.sleep(0.05)
    expect("- late (1 tools)" in description(await client.list_tools()), "late is not listed as running")
    report = await execute(client, "tools.hung.anything()")
    error = report["error"] or {}
    expect(error.get("type") == "ToolError" and "still starting after 3 s" in error.get("message", ""), report)
    report = ok(await execute(client, "tools.filesystem.list_allowed_directories()"))
    expect(str(data) in json.dumps(report["result"]), report)


async def check_many(client, data, tmp):
    text = lambda r: "".join(getattr(c, "text", "") for c in r.content)
    listed = await client.list_tools()
    description = next(t.description for t in listed.tools if t.name == "execute_code")
    for i in range(MANY_SERVERS):
        expect(f"- big{i} (10000 tools)" in description, description)
    # The catalogue is rendered once per version and only for the servers a script touches:
    # plain scripts cost nothing of it (each used to rebuild all 50,000 signatures).
    for _ in range(20):
        report = ok(await execute(client, "print(1)"))
        expect(report["stdout"] == "1\n", report)
    code = ("[tools.big3.tool_9999(key='k'), len(dir(tools.big0)), repr(tools.big1),"
            " tools.big2.tool_7.__doc__.splitlines()[0], tools.filesystem.list_allowed_directories()]")
    for _ in range(3):
        report = ok(await execute(client, code))
    result = report["result"]
    expect(result[0] == {"tool": "tool-9999", "arguments": {"key": "k"}}, report)
    # A docstring starts with the tool's approval policy (its config allows every tool).
    expect(result[1:4] == [10000, "<MCP server big1: 10000 tools>", "[approval: allow] Tool number 7. Looks up item 7 by key."], report)
    expect(str(data) in json.dumps(result[4]), report)
    report = await execute(client, "tools.big4.tool_1(key='k', colour='red')")
    expect("unexpected keyword argument 'colour'" in (report["error"] or {}).get("message", ""), report)
    listing = text(await client.call_tool("list_tools", {"server": "big1"}))
    expect(listing.count("\n  tools.big1.") == 500 and 'list_tools(server="big1", offset=500)' in listing, listing[-500:])
    found = text(await client.call_tool("search_tools", {"query": "item 4321", "limit": 100000}))
    expect(found.startswith("tools.big") and "tool_4321(*, key: str" in found.splitlines()[0], found[:500])
    expect(len(found.splitlines()) <= 2 * 100 + 1, f"search_tools answered {len(found.splitlines())} lines")
    ours = subprocess.run(["pgrep", "-f", f"serve --config {tmp / 'servers.json'}"], capture_output=True, text=True)
    pids = [int(p) for p in ours.stdout.split()]
    expect(len(pids) == 1, f"our server's pid: {ours.stdout!r}")
    status = Path(f"/proc/{pids[0]}/status").read_text()
    peak_kib = int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmHWM:")))
    print(f"peak RSS with {MANY_SERVERS * 10000} tools: {peak_kib // 1024} MiB", file=sys.stderr)
    expect(peak_kib < MANY_PEAK_MIB * 1024, f"our peak RSS was {peak_kib // 1024} MiB (bound {MANY_PEAK_MIB} MiB)")


async def settle(client):
    """Waits until no configured server is in its first start, as a patient client would."""
    with anyio.fail_after(40):
        while True:
            tools = await client.list_tools()
            text = next(t.description for t in tools.tools if t.name == "execute_code")
            if ": starting" not in text:
                return
            await anyio.sleep(0.1)


NOTIFICATIONS = []
CONNECT_SECONDS = []


async def record_notification(message):
    root = getattr(message, "root", message)
    method = getattr(root, "method", None)
    if isinstance(method, str):
        NOTIFICATIONS.append(method)


# ---- over HTTP ------------------------------------------------------------------------------

TOKEN = "test-token-" + "0123456789abcdef" * 2


class HttpServer:
    """`BIN serve --http 127.0.0.1:0 ...` with a token file; the URL from its first stderr line."""

    def __init__(self, bin, tmp, config_path, env, extra=()):
        token_file = tmp / "token.txt"
        token_file.write_text(TOKEN + "\n")
        self.proc = subprocess.Popen(
            [bin, "serve", "--config", str(config_path), "--http", "127.0.0.1:0", "--auth-token-file", str(token_file), *extra],
            env=dict(env, MCP_CODE_MODE_LOG="info"), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        self.stderr = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            line = self.proc.stderr.readline()
            if not line:
                break
            self.stderr.append(line)
            if "serving MCP at " in line:
                self.url = line.split("serving MCP at ", 1)[1].strip()
                self.base = self.url.rsplit("/", 1)[0]
                threading.Thread(target=self._drain, daemon=True).start()
                return
        self.proc.kill()
        raise CheckFailed(f"serve --http did not say where it listens: {''.join(self.stderr)}")

    def _drain(self):
        for line in self.proc.stderr:
            self.stderr.append(line)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()

    def client(self, mode, token=TOKEN, **kwargs):
        http = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
        return Client(streamable_http_client(self.url, http_client=http), mode=mode, **kwargs)


def http_request(url, method="GET", body=None, headers=None):
    """(status, headers, body text) of one plain HTTP request."""
    request = urllib.request.Request(url, data=body, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=30) as r:
            return r.status, r.headers, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read().decode()


INITIALIZE = json.dumps({
    "jsonrpc": "2.0", "id": 1, "method": "initialize",
    "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}},
}).encode()
MCP_HEADERS = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}


async def check_http_front(client, data, tmp, server):
    """What the HTTP front refuses, its probes, and a graceful shutdown (last: it stops the server)."""
    auth = {"Authorization": f"Bearer {TOKEN}"}
    status, headers, body = http_request(server.url, "POST", INITIALIZE, MCP_HEADERS)
    expect(status == 401 and headers.get("WWW-Authenticate", "").startswith("Bearer"), f"no token: {status} {dict(headers)} {body}")
    status, _, _ = http_request(server.url, "POST", INITIALIZE, {**MCP_HEADERS, "Authorization": f"Bearer {TOKEN[:-1]}x"})
    expect(status == 401, f"a wrong token: {status}")
    status, _, body = http_request(server.url, "POST", INITIALIZE, {**MCP_HEADERS, **auth, "Host": "evil.example:80"})
    expect(status == 403, f"a foreign Host (DNS rebinding) must be refused: {status} {body}")
    status, _, body = http_request(server.url, "POST", INITIALIZE, {**MCP_HEADERS, **auth, "Origin": "http://evil.example"})
    expect(status == 403, f"a foreign Origin must be refused: {status} {body}")
    status, _, _ = http_request(server.url, "POST", b"[" + b" " * (17 << 20) + b"]", {**MCP_HEADERS, **auth})
    expect(status == 413, f"a 17 MiB body must be refused: {status}")
    status, _, body = http_request(server.base + "/healthz")
    expect(status == 200 and body == "ok\n", f"healthz: {status} {body!r}")
    # Ready once the zygote has forked its first child (a probe polls, as Kubernetes would).
    with anyio.fail_after(60):
        while (answer := http_request(server.base + "/readyz"))[0] != 200:
            expect(answer[0] == 503, f"readyz while starting: {answer[0]} {answer[2]!r}")
            await anyio.sleep(0.2)
    expect(json.loads(answer[2])["servers_starting"] == 0, f"readyz: {answer[2]!r}")
    # The server runs with --max-sessions 3; a legacy client holds one (2026-07-28 has no sessions).
    held = 1 if client.protocol_version < "2026-07-28" else 0
    opened = [http_request(server.url, "POST", INITIALIZE, {**MCP_HEADERS, **auth}) for _ in range(3 - held)]
    expect(all(s == 200 and h.get("Mcp-Session-Id") for s, h, _ in opened), f"sessions: {[(s, b) for s, _, b in opened]}")
    status, _, body = http_request(server.url, "POST", INITIALIZE, {**MCP_HEADERS, **auth})
    expect(status == 503 and "--max-sessions 3" in body, f"past the cap: {status} {body!r}")
    gone = opened[0][1]["Mcp-Session-Id"]
    status, _, _ = http_request(server.url, "DELETE", headers={**auth, "Mcp-Session-Id": gone})
    expect(status in (200, 202, 204), f"DELETE of a session: {status}")
    status, _, _ = http_request(server.url, "POST", INITIALIZE, {**MCP_HEADERS, **auth})
    expect(status == 200, f"a session closed frees its place: {status}")
    log = "".join(server.stderr)
    leaks = [line for line in log.splitlines() if TOKEN in line or gone in line]
    expect(not leaks, f"the token or a session id reached the log: {leaks[:3]}")
    expect(" POST /mcp 401 " in log, f"no access-log line for the refused request: {log[-2000:]}")
    # SIGTERM while a script runs: it finishes and is answered; then the process exits 0.
    results = {}

    async def slow():
        results["slow"] = ok(await execute(client, "import time\ntime.sleep(2)\n'finished'"))["result"]

    async with anyio.create_task_group() as tg:
        tg.start_soon(slow)
        await anyio.sleep(0.8)
        server.proc.send_signal(signal.SIGTERM)
    expect(results == {"slow": "finished"}, f"the running script did not finish: {results}")
    with anyio.fail_after(20):
        while server.proc.poll() is None:
            await anyio.sleep(0.05)
    expect(server.proc.returncode == 0, f"exit status after SIGTERM: {server.proc.returncode}: {''.join(server.stderr)[-2000:]}")


HTTP_ONLY = {"http_front"}


async def check_local_notice(client, data, tmp):
    """--executor local says, where the model reads, that scripts are not sandboxed, and runs them
    in host CPython (with its packages: the `mcp` client this driver runs on is one)."""
    import getpass
    import socket

    notice = f"not sandboxed: the script runs as {getpass.getuser()} on {socket.gethostname()}"
    listed = await client.list_tools()
    description = next(t.description for t in listed.tools if t.name == "execute_code")
    expect(notice in description, f"execute_code's description lacks {notice!r}: {description}")
    expect(notice in (client.instructions or ""), f"the initialize instructions lack {notice!r}: {client.instructions!r}")
    report = ok(await execute(client, "import sys, mcp\n(sys.platform, sys.implementation.name, mcp.__name__)"))
    expect(report["result"] == ["linux", "cpython", "mcp"], report)


LOCAL_ONLY = {"local_notice"}

# check_record: our binary, which it runs again as `run --replay`; set by main.
BIN = None


async def check_record(client, data, tmp):
    """serve --record-dir: the report names its execution id; `run --replay` of that cassette, from
    an empty folder with no config and no PATH (no server can start), prints what it printed."""
    code = (
        "import asyncio\n"
        "fs, ev = tools.filesystem, tools.everything\n"
        "root = fs.list_allowed_directories()['content'].splitlines()[1]\n"
        "print(fs.read_text_file(path=f'{root}/notes/alpha.txt')['content'])\n"
        "print(await asyncio.gather(*(ev.get_sum.aio(a=i, b=i) for i in range(3))))\n"
        "tools.memory.create_entities(entities=[{'name': 'rec', 'entityType': 't', 'observations': ['ö']}])\n"
        "sorted(e['name'] for e in tools.memory.read_graph()['entities'])\n"
    )
    report = ok(await execute(client, code))
    execution_id = report.get("execution_id")
    expect(isinstance(execution_id, str) and execution_id, f"no execution_id: {report}")
    other = ok(await execute(client, "1"))
    expect(other["execution_id"] != execution_id, f"two executions share the id {execution_id}")
    cassette = tmp / "cassettes" / f"{execution_id}.jsonl"
    expect(cassette.is_file(), f"no cassette {cassette}: {sorted(p.name for p in (tmp / 'cassettes').iterdir())}")
    # The data folder came from ${TEST_DATA_DIR}: a value from the environment is kept out.
    expect(str(data) not in cassette.read_text(), "the expanded ${TEST_DATA_DIR} is in the cassette")
    empty = tmp / "empty"
    empty.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("MCP_CODE_MODE_")}
    env["PATH"] = ""
    out = subprocess.run([BIN, "run", "--replay", str(cassette)], cwd=empty, env=env, capture_output=True,
                         text=True, timeout=120)
    expected = report["stdout"] + json.dumps(report["result"], ensure_ascii=False, separators=(",", ":")) + "\n"
    expect(out.returncode == 0 and out.stdout == expected and out.stderr == report["stderr"],
           f"the replay printed {out.stdout!r} (stderr {out.stderr!r}, exit {out.returncode}), the execution {expected!r}")


CHECKS = {name[len("check_"):]: fn for name, fn in globals().items() if name.startswith("check_")}


async def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("bin")
    parser.add_argument("check", choices=sorted(CHECKS))
    parser.add_argument("--mode", choices=["auto", "legacy"], required=True)
    parser.add_argument("--transport", choices=["stdio", "http"], default="stdio")
    parser.add_argument("--executor", choices=["sandbox", "local"], default="sandbox")
    args = parser.parse_args()
    global BIN
    BIN = args.bin
    if args.check in HTTP_ONLY and args.transport != "http":
        parser.error(f"{args.check} runs only with --transport http")
    if args.check in LOCAL_ONLY and args.executor != "local":
        parser.error(f"{args.check} runs only with --executor local")
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        data, config_path, env = setup(
            tmp, with_changer=args.check == "list_changed", with_starting=args.check == "starting",
            with_many=args.check == "many",
        )
        options = dict(mode=args.mode, read_timeout_seconds=60, message_handler=record_notification)
        flags = ["--record-dir", str(tmp / "cassettes")] if args.check == "record" else []
        if args.executor == "local":
            flags += ["--executor", "local"]
        if args.check == "http_front":
            flags = ["--max-sessions", "3"]
        connecting = time.monotonic()
        async with serving(args.bin, args.transport, tmp, config_path, env, flags, **options) as (client, server):
            CONNECT_SECONDS.append(time.monotonic() - connecting)
            if args.check != "starting":
                await settle(client)
            check = CHECKS[args.check]
            await (check(client, data, tmp, server) if args.check in HTTP_ONLY else check(client, data, tmp))
            print(f"ok: {args.check} ({args.mode}, protocol {client.protocol_version}, {args.transport}, {args.executor})")


@asynccontextmanager
async def serving(bin, transport, tmp, config_path, env, flags=(), **options):
    """A client of `BIN serve --config CONFIG FLAGS...` over stdio, or over HTTP (`transport`
    "http"): yields the client and the HTTP server (None over stdio), stopped on the way out."""
    server = HttpServer(bin, tmp, config_path, env, flags) if transport == "http" else None
    if server:
        connect = server.client(**options)
    else:
        params = StdioServerParameters(command=bin, args=["serve", "--config", str(config_path), *flags], env=env)
        connect = Client(params, **options)
    try:
        async with connect as client:
            yield client, server
    finally:
        if server:
            server.stop()


def run_main(main):
    """Runs a script's async `main`: a failed check ends it with `FAILED: why` and status 1."""
    try:
        anyio.run(main)
    except BaseException as e:  # the client's task groups wrap our CheckFailed
        failure = first_failure(e)
        if failure is None:
            raise
        print(f"FAILED: {failure}", file=sys.stderr)
        sys.exit(1)


def first_failure(error):
    if isinstance(error, CheckFailed):
        return error
    for inner in getattr(error, "exceptions", ()):
        found = first_failure(inner)
        if found:
            return found
    return None


if __name__ == "__main__":
    run_main(main)
