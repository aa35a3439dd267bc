"""Two `serve --http` replicas behind a real HAProxy (deploy/haproxy.cfg), driven by the Python `mcp`
client: 1,000 executions at concurrency 8 (a tool call in every fourth) with 0 failures, spread over
both replicas; then one replica is killed mid-run: calls in flight there fail with an error, new
sessions land on the other, nothing hangs.

usage: python3 replicas.py BIN --mode sessions|stateless

Everything listens on loopback; every loop is bounded in count and in time. Prints
`ok: replicas (MODE) ...` and exits 0 when all holds.
"""

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import anyio
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from checks import MODULES, CheckFailed, expect  # the same failure rule as checks.py

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
EXECUTIONS = 1000
CONCURRENCY = 8
# How long the kill phase runs after the replica dies (seconds). A call in flight on the dead
# replica fails once the client gives up reconnecting its event stream (~6 s: retry 3 s).
AFTER_KILL = 13.0
CALL_LIMIT = 30.0


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(url):
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status
    except Exception:
        return None


class Process:
    """A child whose stderr is kept (read on a thread, so it never blocks on a full pipe)."""

    def __init__(self, args, env):
        self.proc = subprocess.Popen(args, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, text=True)
        self.lines = []
        threading.Thread(target=lambda: self.lines.extend(self.proc.stderr), daemon=True).start()

    def log(self):
        return "".join(self.lines)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


def wait_until(what, condition, seconds):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.1)
    raise CheckFailed(f"timed out waiting for {what}")


def connect(url):
    return Client(streamable_http_client(url), mode="legacy", read_timeout_seconds=CALL_LIMIT)


async def execute(client, code):
    with anyio.fail_after(CALL_LIMIT):
        result = await client.call_tool("execute_code", {"code": code})
    report = result.structured_content
    expect(isinstance(report, dict), f"no structured content: {result}")
    return report


async def steady_load(url):
    """EXECUTIONS at CONCURRENCY, one session per worker; returns the failures."""
    failures = []
    next_index = iter(range(EXECUTIONS))

    async def worker():
        async with connect(url) as client:
            for i in next_index:
                if i % 4 == 0:
                    code, want = f"tools.everything.get_sum(a={i}, b=1)", f"The sum of {i} and 1 is {i + 1}."
                else:
                    code, want = f"{i} * 2", i * 2
                try:
                    report = await execute(client, code)
                    got = report["result"]
                    good = report["error"] is None and got == want
                    if not good:
                        failures.append((i, report))
                except Exception as e:  # a failure of the run, counted, not raised
                    failures.append((i, repr(e)))

    with anyio.fail_after(600):
        async with anyio.create_task_group() as tg:
            for _ in range(CONCURRENCY):
                tg.start_soon(worker)
    return failures


async def kill_phase(url, victim):
    """Workers run 0.3 s scripts (reconnecting after any error); once every worker's calls are
    flowing, `victim` is killed. Returns the outcomes and when the kill happened."""
    outcomes = []  # (seconds since start, worker, "ok" | error text)
    started = time.monotonic()
    killed = []

    def running():
        return not killed or time.monotonic() - started < killed[0] + AFTER_KILL

    async def worker(w):
        while running():
            try:
                async with connect(url) as client:
                    while running():
                        report = await execute(client, "import time\ntime.sleep(0.3)\n'slept'")
                        good = report["error"] is None and report["result"] == "slept"
                        outcomes.append((time.monotonic() - started, w, "ok" if good else json.dumps(report)))
            except BaseException as e:
                if isinstance(e, anyio.get_cancelled_exc_class()):
                    raise
                outcomes.append((time.monotonic() - started, w, f"error: {e!r}"))
                await anyio.sleep(0.1)

    async def killer():
        # Every worker has finished two calls: calls are in flight on both replicas now.
        while len({o[1] for o in outcomes if o[2] == "ok"}) < CONCURRENCY or len(outcomes) < 2 * CONCURRENCY:
            await anyio.sleep(0.05)
        await anyio.sleep(0.15)  # mid-call: each takes 0.3 s
        killed.append(time.monotonic() - started)
        victim.proc.send_signal(signal.SIGKILL)

    with anyio.fail_after(120 + AFTER_KILL + 2 * CALL_LIMIT):
        async with anyio.create_task_group() as tg:
            tg.start_soon(killer)
            for w in range(CONCURRENCY):
                tg.start_soon(worker, w)
    return outcomes, killed[0]


async def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("bin")
    parser.add_argument("--mode", choices=["sessions", "stateless"], required=True)
    args = parser.parse_args()
    processes = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            config = Path(tmp) / "servers.json"
            config.write_text(json.dumps({"mcpServers": {
                "everything": {"command": "node", "args": [str(MODULES / "server-everything/dist/index.js"), "stdio"]},
            }}))
            env = dict(os.environ, MCP_CODE_MODE_LOG="warn,mcp_code_mode::access=info")
            ports = [free_port() for _ in range(3)]
            replicas = []
            for port in ports[1:]:
                extra = ["--stateless"] if args.mode == "stateless" else []
                replica = Process([args.bin, "serve", "--config", str(config), "--http", f"127.0.0.1:{port}", *extra], env)
                processes.append(replica)
                replicas.append(replica)
            for port in ports[1:]:
                wait_until(f"replica on {port} to be ready", lambda: get(f"http://127.0.0.1:{port}/readyz") == 200, 90)
            haproxy_env = dict(os.environ, LISTEN=f"127.0.0.1:{ports[0]}",
                               REPLICA1=f"127.0.0.1:{ports[1]}", REPLICA2=f"127.0.0.1:{ports[2]}")
            haproxy = Process(["haproxy", "-db", "-f", str(ROOT / "deploy" / "haproxy.cfg")], haproxy_env)
            processes.append(haproxy)
            base = f"http://127.0.0.1:{ports[0]}"
            wait_until("HAProxy", lambda: get(base + "/healthz") == 200, 30)
            time.sleep(1.5)  # both replicas pass HAProxy's checks (rise 2 × 500 ms)
            url = base + "/mcp"

            began = time.monotonic()
            failures = await steady_load(url)
            seconds = time.monotonic() - began
            expect(not failures, f"{len(failures)} of {EXECUTIONS} failed, first: {failures[:3]}")
            served = [r.log().count(" POST /mcp 200 ") for r in replicas]
            expect(all(n > 0 for n in served), f"one replica served nothing: POSTs per replica {served}")

            outcomes, kill_at = await kill_phase(url, replicas[0])
            expect(replicas[0].proc.poll() is not None, "the victim still runs")
            errors = [o for o in outcomes if o[2] != "ok"]
            expect(all(o[0] > kill_at for o in errors), f"calls failed before the kill: {errors}")
            after = [o for o in outcomes if o[0] > kill_at + 1.5]
            expect(errors, f"no call failed when a replica died mid-run: {outcomes}")
            expect(all(o[2].startswith("error: ") and len(o[2]) > 10 for o in errors),
                   f"a failure that is not a clear error: {errors}")
            # Every worker recovers (a call that hung would keep its worker from any success after).
            workers_ok_after = {o[1] for o in after if o[2] == "ok"}
            expect(len(workers_ok_after) == CONCURRENCY,
                   f"workers that recovered: {sorted(workers_ok_after)}; errors: {errors}; last outcomes: {outcomes[-12:]}")
            print(f"ok: replicas ({args.mode}) {EXECUTIONS} executions in {seconds:.1f} s "
                  f"({EXECUTIONS / seconds:.0f}/s), POSTs per replica {served}; kill: {len(errors)} calls failed, "
                  f"first: {errors[0][2][:200]}")
    finally:
        for p in processes:
            p.stop()


if __name__ == "__main__":
    try:
        anyio.run(main)
    except CheckFailed as e:
        print(f"FAILED: {e}", file=sys.stderr)
        sys.exit(1)
