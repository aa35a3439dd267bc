"""Drives execute_code's sessions with a real MCP client (PyPI `mcp`), one named check per run.

usage: python3 sessions.py BIN CHECK --transport stdio|http --sandbox fork|thread

Starts `BIN serve` (over stdio, or `serve --http` on a free loopback port with a bearer token)
with the flags the check needs, and no downstream servers unless the check calls a tool.
Prints `ok: CHECK (...)` and exits 0 when the check passes; anything else is a failure.
"""

import argparse
import json
import re
import sys
import tempfile
from pathlib import Path

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent))
from checks import MODULES, expect, run_main, serving  # noqa: E402


async def call(client, tool, **arguments):
    """(is_error, text, structured content) of one tool call."""
    result = await client.call_tool(tool, arguments)
    text = "".join(getattr(c, "text", "") for c in result.content)
    return bool(result.is_error), text, result.structured_content


async def execute(client, code, **extra):
    """The report of an execute_code that ran (a report, failed or not)."""
    is_error, text, report = await call(client, "execute_code", code=code, **extra)
    expect(isinstance(report, dict), f"no report: {text}")
    expect(is_error == (report["error"] is not None), f"isError disagrees with error: {report}")
    return report


async def refused(client, code, session):
    """The message of an execute_code refused before it ran (no report)."""
    is_error, text, report = await call(client, "execute_code", code=code, session=session)
    expect(is_error and not report, f"expected a refusal, got {report or text}")
    return text


def ran(report):
    expect(report["error"] is None, f"the script failed: {report['error']} {report['stderr']}")
    return report


def unknown_message(text, session_id):
    """An unknown-id message with the id taken out: what must read the same for every id."""
    return text.replace(session_id, "<id>")


async def check_basics(client, server, args):
    """A multi-step session: globals, imports and files of call 1 seen in call 2 (and a tool call
    in it); a call without a session is fresh; calls in one session wait for each other; reset
    empties it under the same id; close ends it; an unknown id says so."""
    first = ran(await execute(client, (
        "import json, fractions\n"
        "counter = 41\n"
        "def double(v):\n    return 2 * v\n"
        "with open('/tmp/notes.txt', 'w') as f:\n    f.write('kept between calls')\n"
        "print('first')\n"
        "tools.everything.get_sum(a=2, b=3)"
    ), session="new"))
    sid = first.get("session")
    expect(isinstance(sid, str) and re.fullmatch(r"s-[0-9a-f]{32}", sid), f"no session id: {first}")
    expect(first["stdout"] == "first\n" and first["result"] == "The sum of 2 and 3 is 5.", first)
    second = ran(await execute(client, (
        "print(open('/tmp/notes.txt').read())\n"
        "counter += 1\n"
        "(counter, double(21), json.dumps(fractions.Fraction(1, 2).numerator), tools.everything.get_sum(a=counter, b=1))"
    ), session=sid))
    expect(second["session"] == sid, f"the report names another session: {second}")
    expect(second["stdout"] == "kept between calls\n", f"output of one call only: {second['stdout']!r}")
    expect(second["result"] == [42, 42, "1", "The sum of 42 and 1 is 43."], second)
    expect([c["tool"] for c in second["tool_calls"]] == ["get-sum"], f"this call's tool calls only: {second['tool_calls']}")
    fresh = await execute(client, "counter")
    expect(fresh["error"] and fresh["error"]["type"] == "NameError" and "session" not in fresh, f"a call without a session is fresh: {fresh}")

    # Two calls at once in one session: the second waits for the first, then sees what it left.
    results = {}

    async def slow():
        results["slow"] = ran(await execute(client, "import time\ntime.sleep(1.5)\nlate = 'set by the first'\n1", session=sid))

    async with anyio.create_task_group() as tg:
        tg.start_soon(slow)
        await anyio.sleep(0.4)
        results["waiting"] = ran(await execute(client, "late", session=sid))
    expect(results["waiting"]["result"] == "set by the first", f"the second call did not wait: {results}")

    reset_error, text, _ = await call(client, "reset_session", session=sid)
    expect(not reset_error and "fresh interpreter" in text, text)
    after_reset = await execute(client, "import os\n(os.path.exists('/tmp/notes.txt'), 'counter' in globals())", session=sid)
    expect(ran(after_reset)["result"] == [False, False] and after_reset["session"] == sid, after_reset)

    closed_error, text, _ = await call(client, "close_session", session=sid)
    expect(not closed_error and "closed" in text, text)
    text = await refused(client, "1", sid)
    expect(f"session {sid} has ended: it was closed (close_session)" in text and 'session="new"' in text, text)
    made_up = "s-" + "0" * 32
    text = await refused(client, "1", made_up)
    expect(text.startswith(f'unknown session "{made_up}"') and 'session="new"' in text, text)
    is_error, text, _ = await call(client, "reset_session", session=made_up)
    expect(is_error and "unknown session" in text, text)


async def check_limits(client, server, args):
    """A call that hits its time limit ends the session: the report says so, and the id then says
    why it ended (reset brings it back); so does one that runs out of the session's memory, which
    is counted across its calls."""
    sid = ran(await execute(client, "x = 1", session="new"))["session"]
    timed_out = await execute(client, "print('before', flush=True)\nwhile True:\n    pass", session=sid, timeout_s=1)
    expect(timed_out["error"]["type"] == "TimeoutError" and timed_out["stdout"] == "before\n", timed_out)
    expect("TimeoutError" in (timed_out.get("session_ended") or ""), f"the report does not say the session ended: {timed_out}")
    text = await refused(client, "x", sid)
    expect(f"session {sid} has ended: its call hit a limit" in text and "TimeoutError" in text, text)
    is_error, text, _ = await call(client, "reset_session", session=sid)
    expect(not is_error, text)
    expect(ran(await execute(client, "'x' in globals()", session=sid))["result"] is False, "reset after a limit")

    # --code-session-memory-mb 160: 8 MiB a call fits; growing on, the session runs out.
    sid = ran(await execute(client, "chunks = []", session="new"))["session"]
    grow = "chunks.append(bytearray(8 << 20))\nlen(chunks)"
    for n in range(1, 4):
        expect(ran(await execute(client, grow, session=sid))["result"] == n, f"call {n} of the growing session")
    ended = None
    for _ in range(30):
        report = await execute(client, grow, session=sid)
        if report["error"]:
            ended = report
            break
    expect(ended and ended["error"]["type"] == "MemoryError", f"the session never ran out of memory: {ended}")
    expect("MemoryError" in (ended.get("session_ended") or ""), ended)
    text = await refused(client, "len(chunks)", sid)
    expect(f"session {sid} has ended" in text and "MemoryError" in text, text)
    # A call without a session has the whole --memory-mb (512) to itself.
    fresh = ran(await execute(client, "len([bytearray(8 << 20) for _ in range(20)])"))
    expect(fresh["result"] == 20, fresh)
    # Freshly booted session sandboxes sit idle between calls; none may hold up the others
    # (with threads, their background compile jobs once held V8's shared workers for good).
    sids = [ran(await execute(client, f"n = {i}", session="new"))["session"] for i in range(4)]
    for i, sid in enumerate(sids):
        expect(ran(await execute(client, "n", session=sid))["result"] == i, f"idle session {i}")


async def check_idle(client, server, args):
    """--code-session-idle 1: a session with no call for a second ends, and its id says so."""
    sid = ran(await execute(client, "x = 1", session="new"))["session"]
    expect(ran(await execute(client, "x", session=sid))["result"] == 1, "used within the limit")
    await anyio.sleep(2.5)
    text = await refused(client, "x", sid)
    expect(f"session {sid} has ended: it expired after 1 s without a call (--code-session-idle)" in text, text)


async def check_cap(client, server, args):
    """--max-code-sessions 2: a third live session is refused, naming the flag; closing one (or a
    limit ending one) makes room."""
    first = ran(await execute(client, "1", session="new"))["session"]
    second = ran(await execute(client, "2", session="new"))["session"]
    text = await refused(client, "3", "new")
    expect("too many live sessions (2, the most is 2: --max-code-sessions)" in text and "close_session" in text, text)
    is_error, text, _ = await call(client, "close_session", session=first)
    expect(not is_error, text)
    third = ran(await execute(client, "3", session="new"))["session"]
    expect(len({first, second, third}) == 3, "ids are not reused")
    # An ended session takes no place either.
    ended = await execute(client, "while True:\n    pass", session=second, timeout_s=0.5)
    expect(ended["error"]["type"] == "TimeoutError", ended)
    ran(await execute(client, "4", session="new"))
    # Without a session, calls still run whatever the sessions hold.
    expect(ran(await execute(client, "5"))["result"] == 5, "a call without a session")


async def check_isolation(client, server, args):
    """Over HTTP each MCP session reaches only its own code sessions: another client's id reads
    exactly as one never issued; a client's sessions end with its MCP session; no id is logged."""
    made_up = "s-" + "f" * 32
    async with server.client(mode=args.mode, read_timeout_seconds=60) as owner:
        sid = ran(await execute(owner, "secret = 'only mine'", session="new"))["session"]
        theirs = unknown_message(await refused(client, "secret", sid), sid)
        never = unknown_message(await refused(client, "secret", made_up), made_up)
        expect(theirs == never, f"another client's id reads differently from an unknown one:\n{theirs}\n{never}")
        for tool in ("close_session", "reset_session"):
            is_error, text, _ = await call(client, tool, session=sid)
            expect(is_error and unknown_message(text, sid) == never, f"{tool} of another client's session: {text}")
        # --max-code-sessions 1: the owner's session holds the one place.
        text = await refused(client, "1", "new")
        expect("too many live sessions" in text, text)
        expect(ran(await execute(owner, "secret", session=sid))["result"] == "only mine", "untouched by the other client")
    # The owner's MCP session has ended (its client closed it): so has its code session.
    with anyio.fail_after(10):
        while True:
            is_error, text, report = await call(client, "execute_code", code="'mine now'", session="new")
            if not is_error:
                break
            expect("too many live sessions" in text, text)
            await anyio.sleep(0.2)
    expect(report["result"] == "mine now", report)
    log = "".join(server.stderr)
    expect(sid not in log, "a session id reached the log")


async def check_seed(client, server, args):
    """serve --seed 7: two sessions given the same calls print the same randomness, call after
    call (random, uuid4, os.urandom); so does a call without a session, each time."""
    steps = ["import random, uuid, os\nrandom.random()", "[random.random(), uuid.uuid4().hex, os.urandom(8).hex()]"]
    runs = []
    for _ in range(2):
        sid = ran(await execute(client, steps[0], session="new"))["session"]
        runs.append([ran(await execute(client, step, session=sid))["result"] for step in steps[1:]])
    expect(runs[0] == runs[1], f"two sessions with the same calls differ: {runs}")
    plain = [ran(await execute(client, steps[0] + "\n" + steps[1]))["result"] for _ in range(2)]
    expect(plain[0] == plain[1], f"two calls with the same code differ: {plain}")
    expect(len(set(map(str, runs[0][0]))) == 3, runs)


CHECKS = {name[len("check_"):]: fn for name, fn in globals().items() if name.startswith("check_")}
# What each check starts the server with, and whether it needs the downstream servers.
FLAGS = {
    "basics": [],
    "limits": ["--code-session-memory-mb", "160"],
    "idle": ["--code-session-idle", "1"],
    "cap": ["--max-code-sessions", "2"],
    "isolation": ["--max-code-sessions", "1"],
    "seed": ["--seed", "7"],
}
NEEDS_TOOLS = {"basics"}
HTTP_ONLY = {"isolation"}


async def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("bin")
    parser.add_argument("check", choices=sorted(CHECKS))
    parser.add_argument("--transport", choices=["stdio", "http"], default="stdio")
    parser.add_argument("--sandbox", choices=["fork", "thread"], default="fork")
    parser.add_argument("--mode", choices=["auto", "legacy"], default="legacy")
    args = parser.parse_args()
    if args.check in HTTP_ONLY and args.transport != "http":
        parser.error(f"{args.check} runs only with --transport http")
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        servers = {}
        if args.check in NEEDS_TOOLS:
            servers["everything"] = {"command": "node", "args": [str(MODULES / "server-everything/dist/index.js"), "stdio"]}
        config_path = tmp / "servers.json"
        config_path.write_text(json.dumps({"mcpServers": servers}))
        env = {"PATH": __import__("os").environ["PATH"], "MCP_CODE_MODE_LOG": "warn"}
        flags = ["--sandbox", args.sandbox, *FLAGS[args.check]]
        options = dict(mode=args.mode, read_timeout_seconds=60)
        async with serving(args.bin, args.transport, tmp, config_path, env, flags, **options) as (client, server):
            await CHECKS[args.check](client, server, args)
            print(f"ok: {args.check} ({args.transport}, {args.sandbox}, protocol {client.protocol_version})")


if __name__ == "__main__":
    run_main(main)
