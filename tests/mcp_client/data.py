"""Files in and out of execute_code, and large results, with a real MCP client (PyPI `mcp`).

usage: python3 data.py BIN --transport stdio|http --sandbox fork|thread --mode auto|legacy

Starts `serve` (no downstream servers) with small data limits and runs every check in one
session: a CSV in and a report out (read back, listed), a binary file in, an image out, bad names
and size caps, a 5 MB result read back in pages, eviction, and (over HTTP, legacy sessions)
another client refused. Prints `ok: data (...)` and exits 0 when all pass.
"""

import argparse
import base64
import hashlib
import json
import struct
import sys
import tempfile
import zlib
from pathlib import Path

from mcp.shared.exceptions import MCPError

sys.path.insert(0, str(Path(__file__).resolve().parent))
from checks import CheckFailed, expect, ok, run_main, serving  # noqa: E402

MAX_FILE = 1_000_000
FLAGS = ["--max-output", "6000000", "--max-file-bytes", str(MAX_FILE), "--max-files-bytes", "1500000",
         "--max-output-files", "3", "--keep-runs-mb", "12", "--inline-bytes", "4096"]


def links(result):
    return {c.uri: c for c in result.content if getattr(c, "type", None) == "resource_link"}


async def call(client, code, **extra):
    result = await client.call_tool("execute_code", {"code": code, **extra})
    return result, result.structured_content


async def read(client, uri):
    result = await client.read_resource(uri)
    expect(len(result.contents) == 1, f"{uri}: {result}")
    return result.contents[0]


async def read_error(client, uri):
    try:
        await client.read_resource(uri)
    except MCPError as e:
        return e.error.message
    raise CheckFailed(f"{uri} was read, but should not be")


def png(width=2, height=2):
    """A small valid PNG: red pixels."""
    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    rows = b"".join(b"\x00" + b"\xff\x00\x00" * width for _ in range(height))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))


async def csv_in_report_out(client):
    code = (
        "import csv\n"
        "rows = list(csv.DictReader(open('data.csv')))\n"
        "with open('/output/report.csv', 'w') as f:\n"
        "    f.write('total\\n' + str(sum(int(r['n']) for r in rows)) + '\\n')\n"
        "len(rows)\n"
    )
    result, report = await call(client, code, files={"data.csv": "name,n\na,1\nb,2\nc,39\n"})
    ok(report)
    expect(report["result"] == 3, report)
    [out] = report["outputs"]
    expect(out["path"] == "report.csv" and out["mime_type"] == "text/csv" and out["size"] == 9, out)
    expect(out["uri"] == f"mcp-code-mode://runs/{report['execution_id']}/output/report.csv", out)
    expect(out["uri"] in links(result), f"no resource_link for {out['uri']}: {result.content}")
    contents = await read(client, out["uri"])
    expect(contents.text == "total\n42\n" and contents.mime_type == "text/csv", contents)
    listed = await client.list_resources()
    expect(out["uri"] in [r.uri for r in listed.resources], f"not listed: {listed}")
    templates = await client.list_resource_templates()
    expect(any("{execution_id}" in t.uri_template for t in templates.resource_templates), templates)
    return out["uri"]


async def binary_in(client):
    blob = bytes(range(256)) * 3
    code = "import hashlib\nhashlib.sha256(open('in/blob.bin', 'rb').read()).hexdigest()"
    _, report = await call(client, code, files={"in/blob.bin": {"base64": base64.b64encode(blob).decode()}})
    expect(ok(report)["result"] == hashlib.sha256(blob).hexdigest(), report)


async def image_out(client):
    image = png()
    code = f"open('/output/dot.png', 'wb').write({image!r})\nNone"
    result, report = await call(client, code)
    ok(report)
    [out] = report["outputs"]
    images = [c for c in result.content if getattr(c, "type", None) == "image"]
    expect(len(images) == 1 and images[0].mime_type == "image/png" and base64.b64decode(images[0].data) == image,
           f"no image content: {result.content}")
    contents = await read(client, out["uri"])
    expect(base64.b64decode(contents.blob) == image and contents.mime_type == "image/png", contents)


async def refused(client, files, *expected):
    result = await client.call_tool("execute_code", {"code": "1", "files": files})
    text = "".join(getattr(c, "text", "") for c in result.content)
    expect(result.is_error and all(e in text for e in expected), f"files={str(files)[:80]}: {text}")


async def bad_names_and_caps(client):
    await refused(client, {"../x": "a"}, '"../x"', "'..'")
    await refused(client, {"/etc/passwd": "a"}, '"/etc/passwd"', "absolute")
    await refused(client, {"": "a"}, '""', "empty")
    await refused(client, {"x": 3}, '"x"', '{"base64": "..."}', "a number")
    await refused(client, {"x": {"base64": "@@"}}, '"x"', "not base64")
    await refused(client, {"big.txt": "x" * (MAX_FILE + 1)}, '"big.txt"', f"{MAX_FILE + 1} bytes", "--max-file-bytes")
    await refused(client, {"a": "x" * 900_000, "b": "y" * 900_000}, "1500000", "--max-files-bytes")
    # What a script sends out is bounded too: count and size.
    code = ("for i in range(5): open(f'/output/f{i}.txt', 'w').write(str(i))\n"
            f"open('/output/huge.bin', 'wb').write(b'0' * {MAX_FILE + 1})\n")
    _, report = await call(client, code)
    ok(report)
    expect([o["path"] for o in report["outputs"]] == ["f0.txt", "f1.txt", "f2.txt"], report["outputs"])
    dropped = "\n".join(report["outputs_dropped"])
    expect("/output/f3.txt: not returned: a call returns at most 3 files" in dropped, dropped)
    expect(f"/output/huge.bin: not returned: {MAX_FILE + 1} bytes, more than the {MAX_FILE}" in dropped, dropped)


async def large_result_in_pages(client):
    code = "[{'row': i, 'text': f'row {i:07d} ' + 'x' * 20} for i in range(100_000)]"
    expected = [{"row": i, "text": f"row {i:07d} " + "x" * 20} for i in range(100_000)]
    whole = json.dumps(expected, separators=(",", ":"))
    result, report = await call(client, code)
    ok(report)
    shown = report["result"]
    expect(isinstance(shown, list) and shown[0] == expected[0], str(shown)[:300])
    expect(isinstance(shown[-1], str) and shown[-1].endswith("more items"), str(shown)[-300:])
    expect(len(json.dumps(shown)) < 8000, f"the inline result is {len(json.dumps(shown))} bytes")
    [cut] = report["truncated"]
    expect(cut["field"] == "result" and cut["bytes"] == len(whole) and cut["pages"] == -(-len(whole) // (256 << 10)), cut)
    expect(len(whole) > 5_000_000 and "?page=1" in cut["note"], cut)
    expect(cut["uri"] in links(result), f"no resource_link for {cut['uri']}")
    pages = []
    for page in range(1, cut["pages"] + 1):
        contents = await read(client, f"{cut['uri']}?page={page}")
        meta = contents.meta or {}
        expect(meta.get("page") == page and meta.get("pages") == cut["pages"], f"page {page}: {meta}")
        pages.append(contents.text)
    expect(json.loads("".join(pages)) == expected, "the pages do not make the whole result")
    message = await read_error(client, f"{cut['uri']}?page={cut['pages'] + 1}")
    expect(f"it has pages 1 to {cut['pages']}" in message, message)
    # A long stdout is cut after a line, with the whole behind a link.
    _, report = await call(client, "for i in range(2000): print('line', i)")
    expect(report["stdout"].startswith("line 0\nline 1\n") and "stdout cut after" in report["stdout"], report["stdout"][-300:])
    [cut_out] = report["truncated"]
    expect(cut_out["field"] == "stdout", cut_out)
    contents = await read(client, cut_out["uri"])
    expect(contents.text == "".join(f"line {i}\n" for i in range(2000)), contents.text[-100:])
    return cut["uri"]


async def eviction(client, oldest):
    # Runs are kept up to 12 MiB (--keep-runs-mb 12): two more 5 MB stdouts evict the oldest.
    for _ in range(2):
        _, report = await call(client, "print('y' * 5_000_000)")
        ok(report)
    message = await read_error(client, oldest)
    expect("no longer kept" in message and "evicted" in message and "--keep-runs-mb" in message, message)


async def another_client_refused(server, mode, uri):
    async with server.client(mode=mode, read_timeout_seconds=60) as other:
        theirs = await read_error(other, uri)
        made_up = uri.replace("/runs/", "/runs/0")
        never = await read_error(other, made_up)
        expect(theirs.replace(uri, made_up) == never, f"another session learns something: {theirs!r} vs {never!r}")
        listed = await other.list_resources()
        expect(not listed.resources, f"another session lists {listed.resources}")


async def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("bin")
    parser.add_argument("--transport", choices=["stdio", "http"], required=True)
    parser.add_argument("--sandbox", choices=["fork", "thread"], required=True)
    parser.add_argument("--mode", choices=["auto", "legacy"], default="legacy")
    args = parser.parse_args()
    flags = [*FLAGS, "--sandbox", args.sandbox]
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        config = tmp / "servers.json"
        config.write_text('{"servers": {}}')
        env = {"PATH": "/usr/bin:/bin", "MCP_CODE_MODE_LOG": "warn"}
        options = dict(mode=args.mode, read_timeout_seconds=120)
        async with serving(args.bin, args.transport, tmp, config, env, flags, **options) as (client, server):
            report_uri = await csv_in_report_out(client)
            await binary_in(client)
            await image_out(client)
            await bad_names_and_caps(client)
            result_uri = await large_result_in_pages(client)
            if server and client.protocol_version < "2026-07-28":
                await another_client_refused(server, args.mode, report_uri)
            await eviction(client, result_uri)
            print(f"ok: data ({args.mode}, protocol {client.protocol_version}, {args.transport}, {args.sandbox})")


if __name__ == "__main__":
    run_main(main)
