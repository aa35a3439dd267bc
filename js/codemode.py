"""codemode.py — the Python half of mcp-code-mode's bridge, loaded into every sandbox before a script.

It runs the user's script (`run_job`), shapes the outcome (last expression, error with a traceback
in the script's own line numbers), and exposes the configured MCP servers' tools as
`tools.<server>.<tool>(**kwargs)`, callable plainly (JSPI `run_sync`) or with `await`.

Host-neutral: it reaches the host only through the module `_codemode_host`
(`call_tool(server, tool, args_json) -> Promise[str]`, `catalog_json() -> str` (the servers),
`server_tools_json(server) -> str` (one server's tools), `server_ready(server) -> Promise`,
`wheel_lock() -> str` (the wheelhouse's lock), `wheel(file_name) -> Uint8Array | None`): a JS
module in Pyodide, or, in host CPython (the local executor, js/host_local.py), a Python one with
stand-ins for the three `pyodide` functions used here (and no wheelhouse: the host's own packages).

Packages (in the sandbox only): `_Wheelhouse`, a finder at the end of `sys.meta_path`, installs a
wheelhouse package (and what it depends on) into site-packages the first time a script imports one
of its modules; `micropip` is patched to install from the wheelhouse only (there is no network).
"""

import ast
import builtins
import dis
import difflib
import inspect
import io
import json
import keyword
import linecache
import re
import sys
import textwrap
import tokenize
import traceback
import weakref

from pyodide.ffi import can_run_sync, run_sync

__all__ = ["ToolError", "run_job"]

_BRIDGE_FILE = "<codemode>"

# Imported into the build-time memory snapshot, so a script's first `import json` costs nothing.
WARM_MODULES = [
    "asyncio", "base64", "bisect", "calendar", "collections", "copy", "csv", "dataclasses",
    "datetime", "decimal", "enum", "fractions", "functools", "hashlib", "heapq", "io",
    "itertools", "json", "math", "operator", "pathlib", "pprint", "random", "re", "statistics",
    "string", "textwrap", "time", "typing", "urllib.parse", "uuid",
    # What wheelhouse packages import on the way (Pyodide's stdlib zip holds sources only, so each
    # module imported after the snapshot is compiled again in every sandbox).
    "ast", "contextlib", "email.parser", "fnmatch", "html", "html.parser", "importlib.metadata",
    "importlib.resources", "inspect", "locale", "numbers", "pkgutil", "shutil", "tokenize",
    "unicodedata", "warnings", "weakref", "xml.etree.ElementTree", "zipfile", "zoneinfo",
]


def warm():
    import importlib

    for name in WARM_MODULES:
        importlib.import_module(name)


def reseed():
    """Fresh state for `random` from the sandbox's entropy (seeded by --seed, else the OS)."""
    import random

    random.seed()


async def warm_up():
    """Runs a silent job so the first real one does not pay for first-time compilation."""
    await run_job(json.dumps({"code": "import json\njson.dumps({'a': [1, 2.5]})", "filename": "<warm-up>"}))
    linecache.cache.pop("<warm-up>", None)


# What a zygote runs between forks (warm-up steps): the kinds of work agents' scripts do, so that
# V8 tiers up the interpreter's hot functions once there rather than in every child. Its prints
# take a job's path (stdout and stderr, out through the host), so that a child does not compile
# that path's JS first; the zygote forgets them after each step (`process::Warming::step`).
WARM_ROUND = """\
import json, re, sys
for i in range(20):
    print(f"row {i}: {i * 2.5:.2f}", {"k": [i, str(i)]})
print("warm-up", file=sys.stderr)
rows = [{"id": i, "name": f"n{i}", "tags": ["a", "b", "c"][: i % 3]} for i in range(50)]
back = json.loads(json.dumps(rows, indent=2))
total = sum(len(r["tags"]) for r in back if r["id"] % 2)
counts = {}
for word in " ".join(r["name"] for r in back).split():
    counts[word[:2]] = counts.get(word[:2], 0) + 1
found = re.findall(r"n(\\d+)", " ".join(counts))
try:
    {}["missing"]
except KeyError as e:
    message = repr(e)
class Point:
    def __init__(self, x, y):
        self.x, self.y = x, y
    def __repr__(self):
        return f"Point({self.x}, {self.y})"
points = sorted((Point(i % 7, i) for i in range(30)), key=lambda p: (p.x, -p.y))
sorted(counts.items())[:3], total, len(found), repr(points[0]), message
"""


# What installing and importing a wheelhouse package runs, without installing one: lay a wheel
# out in a scratch folder and read its files, load a module from a file. In a zygote, so that
# every child finds that code compiled and optimized already.
WARM_IMPORT = """\
import codemode, importlib.util, os, shutil
packages = codemode._WHEELHOUSE.packages()
if packages:
    # mpmath: 155 files with its bytecode, enough for V8 to optimize the install loop by the
    # last warm-up round.
    entry = packages.get("mpmath") or next(iter(packages.values()))
    codemode._host().install_wheel(entry["file_name"], "/tmp/codemode-warm")
    if entry.get("bytecode"):
        codemode._host().install_wheel(entry["bytecode"], "/tmp/codemode-warm")
    for folder, _, files in os.walk("/tmp/codemode-warm"):
        for name in files:
            with open(os.path.join(folder, name), "rb") as f:
                f.read()
os.makedirs("/tmp/codemode-warm", exist_ok=True)
with open("/tmp/codemode-warm/warm_pkg.py", "w") as f:
    f.write("VALUE = [1, 2, 3]\\n")
spec = importlib.util.spec_from_file_location("warm_pkg", "/tmp/codemode-warm/warm_pkg.py")
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
shutil.rmtree("/tmp/codemode-warm")
module.VALUE
"""


# A tool call's path (this module's callable, runner.js, the op and its promise, JSPI's
# suspension), plain, awaited and failing, against the zygote's warm-up tools
# (engine::zygote::WarmUpTools): enough calls over a zygote's rounds for V8 to optimize that path
# once, in the zygote, instead of in every child that calls tools.
WARM_TOOLS = """\
add = tools.warm_up.add
total = 0
for i in range(100):
    total += add(a=i, b=2)["sum"]
total += (await add(a=1, b=2))["sum"]
try:
    tools.warm_up.fail()
except ToolError as e:
    total += len(e.kind)
total
"""


# Python's compiler, on every job's path (the script) and on a first import of what has no
# bytecode: a large source (argparse's, read, not imported) compiled in parts, one job each, so
# that no step of a round holds a request up long.
WARM_COMPILE = "import codemode\ncompile(codemode._source_part('argparse', {part}, {parts}), '<warm-up>', 'exec')\n"
WARM_COMPILE_PARTS = 4


def _source_part(module, part, parts):
    """Part `part` of `parts` of a standard-library module's source, cut where top-level
    definitions start, so that each part compiles on its own. Read from the stdlib's zip, not
    imported."""
    import zipimport

    source = zipimport.zipimporter(next(p for p in sys.path if p.endswith(".zip"))).get_source(module)
    starts = [m.start() + 2 for m in re.finditer(r"\n\n(?=(?:def|class) )", source)]
    cuts = [min(starts, key=lambda c: abs(c - len(source) * k // parts)) for k in range(1, parts)]
    bounds = [0, *cuts, len(source)]
    return source[bounds[part] : bounds[part + 1]]


def warm_jobs():
    """A zygote's warm-up round, as jobs for runner.js's runJob: one like an agent's, one that
    calls tools, one that fails, one that does what importing a wheelhouse package does, and the
    compiler's parts."""
    codes = (
        WARM_ROUND,
        WARM_TOOLS,
        "def f(x):\n    return 1 / x\nf(0)",
        WARM_IMPORT,
        *(WARM_COMPILE.format(part=i, parts=WARM_COMPILE_PARTS) for i in range(WARM_COMPILE_PARTS)),
    )
    # Output limits, as every job of a server carries: a job with them looks for files to return
    # (walks /output), and that path's JS is then tiered up here, not in every child. Their
    # values do not matter: no warm-up job leaves a file there.
    outputs = {"max_files": 0, "max_file_bytes": 0, "max_total_bytes": 0}
    return json.dumps([{"code": code, "filename": "<warm-up>", "reseed": True, "outputs": outputs} for code in codes])


def warm_done():
    """After each step of a zygote's warm-up (one job): what is alive now is the zygote's, shared
    with every child forked next. Frozen out of the cyclic GC (gc.freeze), so that no child's
    collection writes to (and so copies) the pages holding it; what was frozen before is not
    walked again. And made immortal, so that no child writes a reference count into it either."""
    import gc

    linecache.cache.pop("<warm-up>", None)
    _AWAITED_CALLS.clear()  # keyed by the warm-up's code objects: nothing of theirs stays
    gc.collect()
    _immortalize(gc)
    gc.freeze()


# PEP 683 on 32-bit CPython 3.14 (Pyodide): an object whose reference count (its first word) is
# 2**30 or more is immortal; 5 << 28 is the count CPython gives what it makes immortal as it runs.
_IMMORTAL_MINIMUM, _IMMORTAL = 1 << 30, 5 << 28
# Objects a step left, not yet made immortal; and how long a step may spend making them so, so
# that a request waits little longer for a step (all a boot left took ~75 ms at once, with sympy
# preloaded ~250).
_mortal = []
_IMMORTAL_SECONDS_PER_STEP = 0.015


def _immortalize(gc):
    """Makes the objects each step left alive immortal, with the untracked objects they refer to
    (strings, numbers), for a bounded time per step (the zygote runs dozens of steps before it
    forks for good). A child's job then writes no reference count into the zygote's objects
    (its modules, functions, classes), each in a page of its own as often as not, which the
    kernel copied for every child: of the ~710 pages a `print(1)` job wrote, ~165 (the CPU per
    back-to-back execution, measured: ~0.7 ms less of ~7). The cost: these objects are never freed
    (they live for the zygote's life anyway), and `sys.getrefcount` of one reads 1342177279. Only
    where the layout is the one above (else a child copies those pages, as before)."""
    import ctypes
    import time

    if sys.maxsize != (1 << 31) - 1 or sys.version_info[:2] != (3, 14):
        return
    # Every word of wasm memory below 2 GiB, as numbers (the zygote's objects lie far below).
    words = (ctypes.c_int32 * ((1 << 29) - 1)).from_address(0)

    def make_immortal(o):
        at = id(o) >> 2
        if at < len(words) and 0 < words[at] < _IMMORTAL_MINIMUM:
            words[at] = _IMMORTAL

    # What is not frozen yet: what the last step left (gc.freeze follows every step).
    _mortal.extend(gc.get_objects())
    until = time.perf_counter() + _IMMORTAL_SECONDS_PER_STEP
    while _mortal and time.perf_counter() < until:
        o = _mortal.pop()
        make_immortal(o)
        for referred in gc.get_referents(o):
            if not gc.is_tracked(referred):
                make_immortal(referred)


def _host():
    # Imported on first use, never at module import: the module is part of the memory snapshot,
    # and the host's JS object cannot be.
    import _codemode_host

    return _codemode_host


class ToolError(Exception):
    """A tool call failed: the tool reported an error, or its server could not answer.

    `kind` says whose failure it is: "tool" (the tool reported an error), "server" (an error
    answer, no answer in time, a lost connection), "invalid" (names or arguments refused),
    "not_found" (no such server or tool), "unavailable" (disabled, starting, down), "denied" (a
    rule or a person said no), "limit" (this execution's calls or memory), "replay" (a replay
    diverged from its recording), "recorded" (an error replayed from a recording).
    """

    def __init__(self, server, tool, message, kind="server"):
        super().__init__(f"{server}.{tool}: {message}")
        self.server = server
        self.tool = tool
        self.message = message
        self.kind = kind


# ---------------------------------------------------------------------------------------------
# tools.<server>.<tool>


def python_name(name):
    """For suggestions only; the real mapping is bridge/signature.rs's (the catalogue carries it)."""
    mapped = re.sub(r"\W", "_", name)
    if not mapped or mapped[0].isdigit():
        mapped = "_" + mapped
    if keyword.iskeyword(mapped):
        mapped += "_"
    return mapped


def _close(word, names):
    """The names `word` is probably a typo of, best first: close ones, and only the best of those."""
    scored = sorted(((difflib.SequenceMatcher(None, word, n).ratio(), n) for n in names), reverse=True)
    best = scored[0][0] if scored else 0
    return [n for ratio, n in scored[:3] if ratio >= 0.7 and ratio >= best - 0.1]


class _Hint:
    """Makes `inspect.signature` print an annotation exactly as written (`int | None`)."""

    def __init__(self, text):
        self.text = text

    def __repr__(self):
        return self.text


def _signature(view):
    """An inspect.Signature from the signature the host computed (bridge/signature.rs)."""
    params = [
        inspect.Parameter(
            p["name"],
            inspect.Parameter.KEYWORD_ONLY,
            default=inspect.Parameter.empty if p["required"] else p.get("default"),
            annotation=_Hint(p["hint"]),
        )
        for p in view["params"]
    ]
    if view["var_kwargs"]:
        params.append(inspect.Parameter("kwargs", inspect.Parameter.VAR_KEYWORD))
    return inspect.Signature(params, return_annotation=_Hint(view["returns"]))


def _call_is_awaited():
    """True when our caller's call expression is the operand of `await` (CALL then GET_AWAITABLE)."""
    frame = sys._getframe(2)
    code, lasti = frame.f_code, frame.f_lasti
    cache = _AWAITED_CALLS.get(code)
    if cache is None:
        instructions = list(dis.get_instructions(code))
        # Every offset of the call, its inline caches included: host CPython 3.11 reports a
        # frame's f_lasti at the CALL's last cache entry (the local executor runs 3.10 and later).
        cache = {
            offset: nxt.opname == "GET_AWAITABLE"
            for ins, nxt in zip(instructions, instructions[1:])
            if ins.opname.startswith("CALL")
            for offset in range(ins.offset, nxt.offset, 2)
        }
        _AWAITED_CALLS[code] = cache
    return cache.get(lasti, False)


# Weakly: a session's jobs each bring code of their own, which would otherwise stay for good.
_AWAITED_CALLS = weakref.WeakKeyDictionary()
_call_log = []


def _unwrap(server, tool, envelope_json):
    envelope = json.loads(envelope_json)
    if envelope.get("ok"):
        return envelope.get("value")
    raise ToolError(server, tool, envelope.get("error") or "unknown error", envelope.get("kind") or "server")


def _make_tool(server, spec):
    tool = spec["name"]
    view = spec["signature"]
    signature = _signature(view)
    label = f"{spec['pythonName']}()"
    named = [p["name"] for p in view["params"]] + list(view.get("extra_names", ()))
    required = [p["name"] for p in view["params"] if p["required"]]
    any_key = view.get("open", True)

    def arguments(args, kwargs):
        # Raised here, in the bridge's frames, which tracebacks leave out: the user sees their line.
        if args:
            example = ", ".join(p + "=..." for p in named[:2])
            raise TypeError(f"{label} takes keyword arguments only, e.g. {spec['pythonName']}({example})")
        if not any_key:
            for key in kwargs:
                if key not in named:
                    close = _close(key, named)
                    hint = f"; did you mean {close[0]!r}?" if close else "."
                    takes = ", ".join(named) or "no arguments"
                    raise TypeError(f"{label} got an unexpected keyword argument {key!r}{hint} It takes: {takes}")
        missing = [name for name in required if name not in kwargs]
        if missing:
            raise TypeError(f"{label} is missing required keyword argument(s): {', '.join(map(repr, missing))}")
        return kwargs

    def call(*args, **kwargs):
        payload = json.dumps(arguments(args, kwargs), default=repr)
        if _call_is_awaited():
            return _finish(_host().call_tool(server, tool, payload))
        if not can_run_sync():
            raise RuntimeError(
                f"tools.{server}.{python_name(tool)}() cannot block here (no JSPI stack on this path); "
                f"write `await tools.{server}.{python_name(tool)}(...)` instead"
            )
        return _unwrap(server, tool, run_sync(_host().call_tool(server, tool, payload)))

    async def _finish(promise):
        return _unwrap(server, tool, await promise)

    async def aio(**kwargs):
        """The same call as a coroutine, for asyncio.gather / create_task."""
        return _unwrap(server, tool, await _host().call_tool(server, tool, json.dumps(arguments((), kwargs), default=repr)))

    call.__name__ = call.__qualname__ = spec["pythonName"]
    call.__module__ = f"tools.{server}"
    call.__doc__ = spec["doc"]
    call.__signature__ = signature
    call.aio = aio
    call.mcp_name = tool
    call.server = server
    return call


def _failing_tool(server, tool, message):
    """A tool of a server that could not be reached: calling it raises why, as the hub would."""

    def call(*args, **kwargs):
        raise ToolError(server, tool, message, "unavailable")

    call.__name__ = call.__qualname__ = python_name(tool)
    call.__doc__ = f"MCP server '{server}': {message}"
    return call


def _is_dunder(name):
    """Python's own protocol names (copy, pickle, IPython probe them): never a tool or server."""
    return len(name) > 4 and name.startswith("__") and name.endswith("__")


class _Server:
    """tools.<server>: its tools are read from the host the first time the script touches it,
    and each tool's callable is made on first use, so a script pays only for what it uses."""

    def __init__(self, name, entry):
        self._name = name
        self._description = entry.get("description") or ""
        self._unavailable = entry.get("unavailable")
        self._count = entry.get("tools", 0)
        self._specs = None  # pythonName -> spec, once read
        self._tools = {}  # pythonName -> callable, as made
        self.__doc__ = self._description or f"MCP server '{name}'"
        if self._unavailable:
            self.__doc__ = f"MCP server '{name}': configured, {self._unavailable}"
            self._specs = {}

    def _tool_specs(self):
        specs = self.__dict__.get("_specs")
        if specs is None:
            listed = json.loads(_host().server_tools_json(self._name) or "[]")
            specs = self._specs = {spec["pythonName"]: spec for spec in listed}
        return specs

    def __getattr__(self, attr):
        if "_name" not in self.__dict__:
            raise AttributeError(attr)
        tools = self._tools
        if attr in tools:
            return tools[attr]
        # A protocol probe (copy, pickle) must not make us read the server's tools.
        specs = self._specs if _is_dunder(attr) else self._tool_specs()
        if specs and attr in specs:
            tool = tools[attr] = _make_tool(self._name, specs[attr])
            return tool
        if _is_dunder(attr):
            raise AttributeError(attr)
        unavailable = self._unavailable
        if unavailable:
            why_not = self._wait_if_starting()
            if why_not is None:
                return getattr(self, attr)
            if why_not:
                return _failing_tool(self._name, attr, why_not)
            # Its tools are unknown while it is down: the call goes through and the hub answers
            # with why (or with the result, if the server has come up since).
            return _make_tool(self._name, {"name": attr, "pythonName": attr, "doc": self.__doc__,
                                           "signature": {"params": [], "var_kwargs": True, "open": True, "returns": "Any"}})
        close = _close(python_name(attr), specs)
        hint = f" Did you mean: {', '.join(close)}?" if close else f" Its tools: {', '.join(sorted(specs)) or '(none)'}."
        # name=None: Python's own "Did you mean" would repeat (or contradict) ours.
        raise AttributeError(f"server '{self._name}' has no tool '{attr}'.{hint}", name=None, obj=None)

    def _wait_if_starting(self):
        """A server still starting when the job began: waits for it (bounded by its timeout_s).
        None once it runs (its real tools, signatures and checks are then read), else why not
        ("" when it cannot be waited for here)."""
        if not (self._unavailable or "").startswith("starting") or not can_run_sync():
            return ""
        why_not = run_sync(_host().server_ready(self._name))
        if not why_not and self._refresh():
            return None
        return why_not

    def _refresh(self):
        for entry in json.loads(_host().catalog_json()):
            if entry["server"] == self._name and not entry.get("unavailable"):
                self.__init__(self._name, entry)
                return True
        return False

    def __dir__(self):
        if self._unavailable:
            self._wait_if_starting()
        return sorted(self._tool_specs())

    def __repr__(self):
        if self._unavailable:
            return f"<MCP server {self._name}: {self._unavailable}>"
        count = len(self._specs) if self._specs is not None else self._count
        return f"<MCP server {self._name}: {count} tools>"


class _Tools:
    """tools.<server>.<tool>(**kwargs) for every configured MCP server."""

    def __init__(self, catalog):
        self._servers = {s["pythonName"]: _Server(s["server"], s) for s in catalog}

    def __getattr__(self, attr):
        servers = self.__dict__.get("_servers", {})
        if attr in servers:
            return servers[attr]
        if _is_dunder(attr):
            raise AttributeError(attr)
        close = _close(python_name(attr), servers)
        hint = (f" Did you mean: {', '.join(close)}?" if close
                else f" Configured servers: {', '.join(sorted(servers)) or '(none)'}.")
        raise AttributeError(f"no MCP server named '{attr}'.{hint}", name=None, obj=None)

    def __dir__(self):
        return sorted(self._servers)

    def __repr__(self):
        return f"<tools: {', '.join(sorted(self._servers)) or 'no servers configured'}>"


def _disable_network():
    """The sandbox has no network; say so plainly instead of Emscripten's 'Host is unreachable'."""
    import errno
    import socket

    def refuse(*args, **kwargs):
        raise OSError(errno.ENETUNREACH, "network access is disabled in the mcp-code-mode sandbox; "
                      "reach other systems through tools.<server>.<tool>(...)")

    socket.socket.connect = socket.socket.connect_ex = refuse
    socket.getaddrinfo = refuse


def _compile_stdlib_once():
    """Pyodide's standard library is a zip of sources, and zipimport's `get_filename` compiles a
    module only to name its file (for the spec), so each module imported from the zip was compiled
    twice (`import argparse` in a one-shot `run`, profiled: 135 ms, 125 of them in four compiles,
    two for each of the two modules it loads). The zip's importers name the file from the zip's
    directory instead; loading compiles once, as before."""
    import zipimport

    class SourceZip(zipimport.zipimporter):
        def get_filename(self, fullname):
            path = zipimport._get_module_path(self, fullname)
            files = self._get_files()
            for suffix, _, _ in zipimport._zip_searchorder:
                if path + suffix in files:
                    return files[path + suffix][0]
            raise zipimport.ZipImportError(f"can't find module {fullname!r}", name=fullname)

    sys.path_hooks[:] = [SourceZip if hook is zipimport.zipimporter else hook for hook in sys.path_hooks]
    for path, finder in list(sys.path_importer_cache.items()):
        if type(finder) is zipimport.zipimporter:
            sys.path_importer_cache[path] = SourceZip(path)


# In the sandbox only: the local executor runs in host CPython, as the user, network and all.
SANDBOXED = sys.platform == "emscripten"
if SANDBOXED:
    _disable_network()
    _compile_stdlib_once()

# ---------------------------------------------------------------------------------------------
# packages: the wheelhouse

WHEELHOUSE_HINT = ("the sandbox has no network: packages come from mcp-code-mode's wheelhouse only "
                   "(see `import codemode; codemode.wheelhouse()`); to add one, put its wheel (pure "
                   "py3-none-any, or cp314-cp314-pyemscripten_2026_0_wasm32) in a directory and start "
                   "mcp-code-mode with --wheels DIR")


class _Wheelhouse:
    """A meta-path finder, last in line: a top-level module no other finder has, that a wheelhouse
    package provides, is installed (with its dependencies) from the host's wheels, then found."""

    def __init__(self):
        self._packages = None  # name -> lock entry, read from the host on first use
        self._by_import = None
        self._busy = False
        self.preload = []
        self.installed = set()
        self.install_ms = 0.0

    def packages(self):
        if self._packages is None:
            lock = json.loads(_host().wheel_lock())
            self._packages = lock["packages"]
            self.preload = lock.get("preload", [])
            self._by_import = {}
            for name, entry in sorted(self._packages.items()):
                for module in entry.get("imports", []):
                    self._by_import.setdefault(module, name)
        return self._packages

    def package_for(self, module):
        self.packages()
        return self._by_import.get(module.partition(".")[0])

    def install(self, name, _seen=None):
        """Installs the package `name` (a lock name) and what it depends on; returns what it did."""
        packages = self.packages()
        seen = set() if _seen is None else _seen
        key = name.lower().replace("_", "-").replace(".", "-")
        if key in self.installed or key in seen:
            return []
        entry = packages.get(key)
        if entry is None:
            raise ModuleNotFoundError(f"no package {name!r} in the wheelhouse: {WHEELHOUSE_HINT}", name=name)
        seen.add(key)
        done = []
        for dep in entry.get("depends", []):
            done += self.install(dep, seen)
        # Its files (and the bytecode build.rs compiled for them, if the host has it) are laid out
        # unread; each one's bytes come from the host when it is first read (js/runner.js).
        if not _host().install_wheel(entry["file_name"], _site_packages()):
            raise ModuleNotFoundError(f"the wheelhouse lists {entry['file_name']} but the host does not serve it", name=name)
        if entry.get("bytecode"):
            _host().install_wheel(entry["bytecode"], _site_packages())
        self.installed.add(key)
        return done + [key]

    def find_spec(self, fullname, path=None, target=None):
        if path is not None or "." in fullname or fullname.startswith("_codemode") or self._busy:
            return None  # submodules come from their package's own path
        self._busy = True
        try:
            name = self.package_for(fullname)
        except ImportError:
            return None  # no host yet: the build-time snapshot, or a host without wheels
        finally:
            self._busy = False
        if name is None or name in self.installed:
            return None
        import importlib.machinery

        import time

        started = time.perf_counter()
        self.install(name)
        # Only site-packages' finder: importlib.invalidate_caches() would import importlib.metadata
        # (~0.3 s) for its own finder.
        finder = sys.path_importer_cache.get(_site_packages())
        if finder is not None:
            finder.invalidate_caches()
        spec = importlib.machinery.PathFinder.find_spec(fullname)
        if fullname == "micropip" and spec is not None:
            run = spec.loader.exec_module

            def exec_module(module):
                run(module)
                _patch_micropip(module)

            spec.loader.exec_module = exec_module
        self.install_ms += (time.perf_counter() - started) * 1000  # read by `bench` (row 10)
        return spec

    def invalidate_caches(self):
        pass


def _site_packages():
    # Not sysconfig.get_path("purelib"): importing sysconfig costs ~0.3 s in the sandbox.
    return next((p for p in sys.path if p.endswith("/site-packages")), f"/lib/python{sys.version_info[0]}.{sys.version_info[1]}/site-packages")


_WHEELHOUSE = _Wheelhouse()
if SANDBOXED:  # host CPython imports the host's own packages
    sys.meta_path.append(_WHEELHOUSE)


def preload():
    """Installs and imports the packages the host preloads (`"packages": {"preload": [...]}`), if any."""
    import importlib

    _WHEELHOUSE.packages()
    for name in _WHEELHOUSE.preload:
        _WHEELHOUSE.install(name)
        for module in _WHEELHOUSE.packages()[name].get("imports", []):
            importlib.import_module(module)


def wheelhouse():
    """The packages a script can import: {package: version}."""
    return {name: entry["version"] for name, entry in sorted(_WHEELHOUSE.packages().items())}


def _patch_micropip(micropip):
    """micropip installs from the wheelhouse only, and says so when it cannot; never the network."""

    async def install(requirements, *args, **kwargs):
        from packaging.requirements import InvalidRequirement, Requirement

        for req in [requirements] if isinstance(requirements, str) else list(requirements):
            if req.startswith("emfs:") or req.startswith("file:"):
                raise ValueError(f"micropip.install({req!r}): install wheels from the wheelhouse only "
                                 f"(import the package, or see {WHEELHOUSE_HINT})")
            try:
                parsed = Requirement(req)
            except InvalidRequirement as e:
                raise ValueError(f"micropip.install({req!r}): {e}") from None
            key = parsed.name.lower().replace("_", "-").replace(".", "-")
            entry = _WHEELHOUSE.packages().get(key)
            if entry is None:
                raise ValueError(f"micropip.install({req!r}): {parsed.name} is not in the wheelhouse; "
                                 f"{WHEELHOUSE_HINT}")
            if parsed.specifier and not parsed.specifier.contains(entry["version"], prereleases=True):
                raise ValueError(f"micropip.install({req!r}): the wheelhouse has {parsed.name} "
                                 f"{entry['version']} only")
            _WHEELHOUSE.install(key)

    micropip.install = install

# ---------------------------------------------------------------------------------------------
# running a job


def _jsonable(value):
    """The value as JSON where it converts exactly, else its repr."""
    try:
        return json.loads(json.dumps(value, allow_nan=False))
    except (TypeError, ValueError, RecursionError):
        try:
            return repr(value)
        except Exception as e:  # a broken __repr__ must not lose the rest of the outcome
            return f"<unrepresentable {type(value).__name__}: {type(e).__name__}>"


async def _run_script(code, namespace, filename):
    """Runs a script as Pyodide's `eval_code_async(..., return_mode="last_expr")` does: dedented,
    top-level `await` allowed, everything compiled before anything runs, and the value of its last
    statement when that is an expression not ended by a semicolon. Pyodide's rewrites the tree
    instead (the last expression raised in a copied template, every node's position filled in,
    the module compiled again from the tree): ~190 µs for `print(1)` warm, several times that in a
    forked child's first job; this, ~35 µs. The local executor runs it too."""
    source = textwrap.dedent(code)
    flags = ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
    module = compile(source, filename, "exec", flags | ast.PyCF_ONLY_AST, dont_inherit=True)
    last = None
    if module.body and isinstance(module.body[-1], ast.Expr) and not _ends_with_semicolon(source):
        last = ast.Expression(module.body.pop().value)
    body = compile(module, filename, "exec", flags, dont_inherit=True)
    tail = None if last is None else compile(last, filename, "eval", flags, dont_inherit=True)
    done = eval(body, namespace)
    if body.co_flags & inspect.CO_COROUTINE:
        await done
    if tail is None:
        return None
    value = eval(tail, namespace)
    if tail.co_flags & inspect.CO_COROUTINE:
        value = await value
    return value


def _ends_with_semicolon(source):
    """Whether the last token of `source`, comments and blank lines aside, is a semicolon (then
    the script returns nothing: Pyodide's `should_quiet`, which tokenizes every script)."""
    if ";" not in source:
        return False
    skipped = (tokenize.ENDMARKER, tokenize.NL, tokenize.NEWLINE, tokenize.COMMENT)
    for token in reversed(list(tokenize.generate_tokens(io.StringIO(source).readline))):
        if token.type not in skipped:
            return token.type == tokenize.OP and token.string == ";"
    return False


def _describe_error(exc, filename):
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename != filename:
        tb = tb.tb_next  # drop Pyodide's own frames above the script
    te = traceback.TracebackException(type(exc), exc, tb, compact=True)
    while te.stack and te.stack[-1].filename == _BRIDGE_FILE:
        te.stack.pop()  # and the bridge's frames below a failing tool call
    try:
        message = str(exc)
    except Exception:
        message = "<exception str() failed>"
    if (SANDBOXED and isinstance(exc, ModuleNotFoundError) and exc.name and "." not in exc.name
            and WHEELHOUSE_HINT not in message and exc.name not in sys.modules):
        message += f" ({WHEELHOUSE_HINT})"
        te.__notes__ = [*(te.__notes__ or []), WHEELHOUSE_HINT]
    if SANDBOXED and isinstance(exc, FileNotFoundError) and _is_host_path(exc.filename):
        hint = ("the sandbox has its own in-memory filesystem, not the host's: reach host files "
                "through a configured server's tools, e.g. tools.filesystem.read_text_file(path=...)")
        message += f" ({hint})"
        te.__notes__ = [*(te.__notes__ or []), hint]
    return {"type": type(exc).__name__, "message": message, "traceback": "".join(te.format())}


def _is_host_path(path):
    """An absolute path whose top directory the sandbox does not have: surely meant for the host."""
    import os

    if not isinstance(path, str) or not path.startswith("/"):
        return False
    top = "/" + path.strip("/").split("/", 1)[0]
    return not os.path.exists(top) or top in ("/etc", "/Users", "/root", "/var", "/srv", "/mnt", "/opt")


# ---------------------------------------------------------------------------------------------
# files in (the job's, into the working directory) and out (what the script leaves in /output/)

OUTPUT_DIR = "/output"

# What earlier jobs in this sandbox returned from OUTPUT_DIR: path -> sha256. A later job returns
# only the files it created or changed.
_RETURNED = {}


def _place_files(job):
    """Writes the job's files (names checked by the host) into the working directory."""
    import base64
    import os

    for entry in job.pop("files", None) or []:
        path = entry["path"]
        folder = os.path.dirname(path)
        if folder:
            os.makedirs(folder, exist_ok=True)
        with open(path, "wb") as f:
            f.write(base64.b64decode(entry.pop("base64")))
    if SANDBOXED and job.get("outputs"):
        os.makedirs(OUTPUT_DIR, exist_ok=True)


def _collect_outputs(limits):
    """The files under OUTPUT_DIR this job created or changed, as far as `limits` allow
    ({max_files, max_file_bytes, max_total_bytes}), and those left out with why (`file`: too
    large; `total`: past the total; `count`: past the count). The host checks all of it again."""
    import base64
    import hashlib
    import os

    returned, skipped, total = [], [], 0
    if not os.path.isdir(OUTPUT_DIR):
        return returned, skipped
    paths = []
    for folder, dirs, names in os.walk(OUTPUT_DIR):
        dirs.sort()
        paths += [os.path.join(folder, n) for n in sorted(names)]
    for full in paths:
        if os.path.islink(full) or not os.path.isfile(full):
            continue
        path = os.path.relpath(full, OUTPUT_DIR)
        size = os.path.getsize(full)
        if size > limits["max_file_bytes"]:
            skipped.append({"path": path, "size": size, "why": "file"})
            continue
        with open(full, "rb") as f:
            data = f.read()
        digest = hashlib.sha256(data).digest()
        if _RETURNED.get(path) == digest:
            continue
        if len(returned) >= limits["max_files"]:
            skipped.append({"path": path, "size": len(data), "why": "count"})
        elif total + len(data) > limits["max_total_bytes"]:
            skipped.append({"path": path, "size": len(data), "why": "total"})
        else:
            total += len(data)
            returned.append({"path": path, "base64": base64.b64encode(data).decode("ascii")})
            _RETURNED[path] = digest
    return returned, skipped


# The globals of a session's jobs (None outside a session): each job of a session runs in the
# namespace the previous one left. Never set by warm-up jobs, so a forked child starts without.
_session_namespace = None


async def run_job(job_json):
    job = json.loads(job_json)
    del job_json  # the caller's copy is gone too: the files' base64 is held once, in `job`
    code, filename = job["code"], job.get("filename") or "<script>"
    linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
    outcome = {"result": None, "error": None, "exit_code": 0}
    try:
        _place_files(job)
    except BaseException as e:
        outcome["error"] = {"type": type(e).__name__, "message": f"could not place the job's files: {e}", "traceback": ""}
        return json.dumps(outcome)
    # Read at job start, not at boot: a pre-booted sandbox must see the catalogue as it is now.
    tools = _Tools(json.loads(_host().catalog_json()))
    global _session_namespace
    if job.get("session") and _session_namespace is not None:
        # A session's later job: the globals its earlier jobs left, with today's catalogue.
        namespace = _session_namespace
        namespace.update(tools=tools, ToolError=ToolError)
    else:
        namespace = {"__name__": "__main__", "__builtins__": builtins, "tools": tools, "ToolError": ToolError}
        if job.get("session"):
            _session_namespace = namespace
    sys.stdout.reconfigure(line_buffering=True)  # what was printed before a timeout is not lost
    try:
        value = await _run_script(code, namespace, filename)
        outcome["result"] = _jsonable(value)
    except SystemExit as e:
        code_ = e.code
        if code_ not in (None, 0):
            outcome["exit_code"] = code_ if isinstance(code_, int) else 1
            outcome["error"] = _describe_error(e, filename)
    except BaseException as e:  # KeyboardInterrupt included: the user's script must not escape us
        outcome["error"] = _describe_error(e, filename)
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
    if SANDBOXED and job.get("outputs"):
        try:
            outcome["outputs"], outcome["outputs_skipped"] = _collect_outputs(job["outputs"])
        except Exception as e:  # a full memory must not lose the rest of the outcome
            outcome["outputs_skipped"] = [{"path": "", "why": f"could not read it: {type(e).__name__}: {e}"}]
    return json.dumps(outcome)
