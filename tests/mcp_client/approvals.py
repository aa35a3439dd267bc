"""Approvals driven by a real MCP client (PyPI `mcp`) with an elicitation callback.

usage: python3 approvals.py BIN CHECK --mode auto|legacy [--transport stdio|http]

The config is checks.py's (real filesystem, memory and everything servers) plus approval
settings: filesystem's `move_file` is denied by a rule; its write tools (annotated destructive)
are `ask` by default. Under `legacy` (2025-11-25) the server asks with elicitation/create; under
`auto` (2026-07-28) with an `input_required` result the client answers by retrying. Prints
`ok: CHECK (...)` and exits 0 when the check passes.
"""

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import anyio
from mcp import types

sys.path.insert(0, str(Path(__file__).resolve().parent))
from checks import execute, expect, run_main, serving, settle, setup  # noqa: E402

APPROVAL_TIMEOUT_S = 20


class Person:
    """The elicitation callback: records each question, answers as told (after `delay` s)."""

    def __init__(self, action="accept", allow_all=False, delay=0.0):
        self.action, self.allow_all, self.delay = action, allow_all, delay
        self.questions = []

    async def __call__(self, context, params):
        self.questions.append(params)
        if self.delay:
            await anyio.sleep(self.delay)
        content = {"allow_all": self.allow_all} if self.action == "accept" else None
        return types.ElicitResult(action=self.action, content=content)


def decisions(report):
    return [(c["tool"], (c.get("approval") or {}).get("decision")) for c in report["tool_calls"]]


def text(result):
    return "".join(getattr(c, "text", "") for c in result.content)


# ---- checks: each returns the Person its client uses (None: a client that cannot be asked) ----


def person_for(check):
    return {
        "accept": Person("accept"),
        "decline": Person("decline"),
        "cancel": Person("cancel"),
        "allow_all": Person("accept", allow_all=True),
        "paused_clock": Person("accept", delay=4.0),
        "denied": Person("accept"),
        "unasked": None,
        "stateless_refused": Person("accept"),
        "approve_all": None,
    }[check]


async def check_accept(client, data, person):
    target = data / "notes" / "approved.txt"
    code = f"""
first = tools.filesystem.read_text_file(path={str(data / 'notes' / 'alpha.txt')!r})["content"].splitlines()[0]
tools.filesystem.write_file(path={str(target)!r}, content="written after approval")
first
"""
    report = await execute(client, code)
    expect(report["error"] is None, f"script failed: {json.dumps(report, indent=1)}")
    expect(report["result"] == "alpha line one", report["result"])
    expect(target.read_text() == "written after approval", "the approved write did not happen")
    expect(len(person.questions) == 1, f"asked {len(person.questions)} times: {person.questions}")
    message = person.questions[0].message
    for part in ('filesystem.write_file', 'server "filesystem"', f'path="{target}"', 'content="written after approval"'):
        expect(part in message, f"the question lacks {part!r}: {message}")
    schema = person.questions[0].requested_schema
    expect("allow_all" in schema["properties"] and "remaining calls to filesystem.write_file" in schema["properties"]["allow_all"]["title"], schema)
    expect(decisions(report) == [("read_text_file", "allowed"), ("write_file", "approved")], decisions(report))
    expect("readOnlyHint" in report["tool_calls"][0]["approval"]["by"], report["tool_calls"][0])
    expect(report["tool_calls"][1]["approval"]["by"] == "the user", report["tool_calls"][1])


async def check_decline(client, data, person):
    target = data / "notes" / "declined.txt"
    code = f"""
try:
    tools.filesystem.write_file(path={str(target)!r}, content="nope")
    outcome = "written"
except ToolError as e:
    outcome = (e.server, e.tool, e.message)
print("carried on")
outcome
"""
    report = await execute(client, code)
    expect(report["error"] is None, f"script failed: {json.dumps(report, indent=1)}")
    expect(report["result"] == ["filesystem", "write_file", "declined by the user"], report["result"])
    expect(report["stdout"] == "carried on\n", report["stdout"])
    expect(not target.exists(), "a declined write happened")
    expect(len(person.questions) == 1, person.questions)
    expect(decisions(report) == [("write_file", "declined")], decisions(report))


async def check_cancel(client, data, person):
    target = data / "notes" / "cancelled.txt"
    code = f"""
print("before")
try:
    tools.filesystem.write_file(path={str(target)!r}, content="nope")
except ToolError:
    pass
import time
time.sleep(0.5)
print("after")
"""
    report = await execute(client, code)
    error = report["error"]
    expect(error is not None and error["type"] == "ApprovalCancelled" and "filesystem.write_file" in error["message"], f"not stopped: {json.dumps(report, indent=1)}")
    expect(report["stdout"] == "before\n", f"the script went on: {report['stdout']!r}")
    expect(not target.exists(), "a cancelled write happened")
    expect(decisions(report) == [("write_file", "cancelled")], decisions(report))
    # The server is fine afterwards.
    after = await execute(client, "6 * 7")
    expect(after["result"] == 42, after)


async def check_allow_all(client, data, person):
    code = f"""
root = {str(data / 'notes')!r}
for i in range(3):
    tools.filesystem.write_file(path=f"{{root}}/many{{i}}.txt", content=str(i))
sorted(tools.filesystem.list_directory(path=root)["content"].splitlines())
"""
    report = await execute(client, code)
    expect(report["error"] is None, f"script failed: {json.dumps(report, indent=1)}")
    expect(len(person.questions) == 1, f"asked {len(person.questions)} times for one allow-all")
    for i in range(3):
        expect((data / "notes" / f"many{i}.txt").read_text() == str(i), f"many{i}.txt not written")
    expect(decisions(report) == [("write_file", "approved")] * 3 + [("list_directory", "allowed")], decisions(report))
    expect(all("every call to filesystem.write_file in this run" in c["approval"]["by"] for c in report["tool_calls"][:3]), report["tool_calls"])
    # The allow-all was for that run only: the next execution asks again.
    report = await execute(client, f"tools.filesystem.write_file(path={str(data / 'notes' / 'next.txt')!r}, content='x')")
    expect(report["error"] is None and len(person.questions) == 2, f"{len(person.questions)} questions: {report}")


async def check_paused_clock(client, data, person):
    """The person takes 4 s to answer a script allowed 3 s: the wait is not the script's time."""
    target = data / "notes" / "slow.txt"
    code = f"""
import time
time.sleep(1)
tools.filesystem.write_file(path={str(target)!r}, content="late but approved")
time.sleep(1)
"done"
"""
    started = time.monotonic()
    report = await execute(client, code, timeout_s=3)
    took = time.monotonic() - started
    expect(report["error"] is None and report["result"] == "done", f"the wait counted against the timeout: {json.dumps(report, indent=1)}")
    expect(took >= 6, f"took {took:.1f} s")
    expect(target.read_text() == "late but approved", "the write did not happen")
    # The script's own time still counts.
    report = await execute(client, "import time\ntime.sleep(5)", timeout_s=2)
    expect(report["error"] and report["error"]["type"] == "TimeoutError", report)


async def check_denied(client, data, person):
    """A rule denies move_file; the discovery tools show each tool's policy."""
    code = f"""
try:
    tools.filesystem.move_file(source={str(data / 'notes' / 'beta.txt')!r}, destination={str(data / 'moved.txt')!r})
    r = "moved"
except ToolError as e:
    r = e.message
r
"""
    report = await execute(client, code)
    expect(report["error"] is None, f"script failed: {json.dumps(report, indent=1)}")
    expect("filesystem.move_file is denied by the rule \"move_file\": \"deny\" of server \"filesystem\"" in report["result"], report["result"])
    expect((data / "notes" / "beta.txt").exists(), "a denied move happened")
    expect(person.questions == [], f"a denied call asked: {person.questions}")
    expect(decisions(report) == [("move_file", "denied")], decisions(report))
    listing = text(await client.call_tool("list_tools", {"server": "filesystem"}))
    lines = {line.split()[0]: line for line in listing.splitlines() if line.strip().startswith("tools.")}
    expect("[approval: deny" in lines["tools.filesystem.move_file"], listing)
    expect("[approval: allow]" in lines["tools.filesystem.read_text_file"], listing)
    expect("[approval: ask" in lines["tools.filesystem.write_file"], listing)
    expect("[approval: allow]" in lines["tools.filesystem.create_directory"], listing)
    sig = text(await client.call_tool("get_tool_signatures", {"names": ["filesystem.write_file"]}))
    expect("[approval: ask: each call asks the user]" in sig, sig)
    # Python's own help() shows it too.
    report = await execute(client, "tools.filesystem.edit_file.__doc__")
    expect("[approval: ask" in report["result"], report["result"])


async def check_unasked(client, data, person):
    """A client without elicitation: `ask` becomes a refusal saying how to allow the tool."""
    target = data / "notes" / "unasked.txt"
    code = f"""
try:
    tools.filesystem.write_file(path={str(target)!r}, content="nope")
    r = "written"
except ToolError as e:
    r = e.message
r
"""
    report = await execute(client, code)
    expect(report["error"] is None, f"script failed: {json.dumps(report, indent=1)}")
    message = report["result"]
    for part in ("cannot ask its user", '"policy": {"write_file": "allow"}', 'server "filesystem"', "servers.json", "--approve-all"):
        expect(part in message, f"the refusal lacks {part!r}: {message}")
    expect(not target.exists(), "an unasked write happened")
    expect(decisions(report) == [("write_file", "denied")], decisions(report))
    # Reads need no one.
    report = await execute(client, f"tools.filesystem.read_text_file(path={str(data / 'notes' / 'beta.txt')!r})['content']")
    expect(report["result"] == "beta has one line\n", report)


async def check_stateless_refused(client, data, person):
    """`serve --http --stateless` under 2025-11-25: no session carries an elicitation's answer, so
    even a client that could answer is not asked: `ask` is refused (never allowed, never hung)."""
    target = data / "notes" / "stateless.txt"
    started = time.monotonic()
    report = await execute(client, f"tools.filesystem.write_file(path={str(target)!r}, content='x')")
    expect(time.monotonic() - started < APPROVAL_TIMEOUT_S / 2, "the refusal waited for the approval timeout")
    expect(report["error"] and "cannot ask its user" in report["error"]["message"], json.dumps(report, indent=1))
    expect(person.questions == [] and not target.exists(), f"asked {person.questions}")
    expect(decisions(report) == [("write_file", "denied")], decisions(report))


async def check_approve_all(client, data, person):
    """serve --approve-all: `ask` runs unasked, and says so in the audit; `deny` still holds."""
    target = data / "notes" / "trusted.txt"
    report = await execute(client, f"tools.filesystem.write_file(path={str(target)!r}, content='ok')")
    expect(report["error"] is None and target.exists(), json.dumps(report, indent=1))
    expect(report["tool_calls"][0]["approval"] == {"decision": "approved", "by": "--approve-all"}, report["tool_calls"])
    report = await execute(client, f"tools.filesystem.move_file(source={str(target)!r}, destination={str(data / 'x.txt')!r})")
    expect(report["error"] and "denied by the rule" in report["error"]["message"], report)


CHECKS = {name[len("check_"):]: fn for name, fn in globals().items() if name.startswith("check_")}


async def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("bin")
    parser.add_argument("check", choices=sorted(CHECKS))
    parser.add_argument("--mode", choices=["auto", "legacy"], required=True)
    parser.add_argument("--transport", choices=["stdio", "http", "http-stateless"], default="stdio")
    parser.add_argument("--executor", choices=["sandbox", "local"], default="sandbox")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        data, config_path, env = setup(tmp)
        config = json.loads(config_path.read_text())
        config["mcpServers"]["filesystem"]["policy"] = {"move_file": "deny"}
        config["approvals"] = {"timeout_s": APPROVAL_TIMEOUT_S}
        config_path.write_text(json.dumps(config, indent=2))
        person = person_for(args.check)
        options = dict(mode=args.mode, read_timeout_seconds=60)
        if person is not None:
            options["elicitation_callback"] = person
        extra = ["--approve-all"] if args.check == "approve_all" else []
        extra += ["--executor", args.executor]
        if args.transport == "http-stateless":
            extra.append("--stateless")
        transport = "http" if args.transport.startswith("http") else "stdio"
        async with serving(args.bin, transport, tmp, config_path, env, extra, **options) as (client, server):
            await settle(client)
            await CHECKS[args.check](client, data, person)
            print(f"ok: {args.check} ({args.mode}, protocol {client.protocol_version}, {args.transport})")
        if server and args.check == "approve_all":
            log = "".join(server.stderr)
            expect("WARNING: --approve-all" in log, f"--approve-all was not warned about: {log[-2000:]}")
            # Every decision is in the log too (serve --http logs at info).
            for line in ("filesystem.write_file: approved by --approve-all",
                         'filesystem.move_file: denied by the rule "move_file": "deny"'):
                expect(line in log, f"the log lacks {line!r}: {log[-3000:]}")


if __name__ == "__main__":
    run_main(main)
