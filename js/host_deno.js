/*
 * host_deno.js — the few browser/shell globals Pyodide needs, for a bare deno_core isolate.
 *
 * Imported first by main_deno.js: Pyodide's loader decides which environment it is in while its
 * module evaluates, so these must exist before `pyodide.mjs` runs. `read` + `load` send the loader
 * down its "shell" path (files through `readbuffer`, no fetch, no URL); `WorkerGlobalScope` keeps
 * the Emscripten glue off its d8 path (whose random source would be `os.system`).
 *
 * Everything that touches the host goes through a Rust op that validates its own arguments:
 *   op_assets_read, op_assets_text   pinned Pyodide files only
 *   op_entropy_fill                  seeded or fresh randomness (the sandbox's only entropy)
 *   op_clock_now                     monotonic milliseconds
 *   op_text_decode                   utf-8 / latin1 / utf-16le, with `fatal`
 *   op_void_async_deferred           deno_core's own: resolves on the next event-loop turn
 *   op_wasm_cached_module, op_wasm_cache_module   Pyodide's wasm, compiled once per process
 *   op_output_write                  `console` writes to the script's captured stderr
 *   op_memory_charge                 the sandbox's memory budget (see "Memory" below)
 * Nothing here is Pyodide-specific beyond the names above; no other host file is reachable.
 *
 * The ops are held in this module's closures only: main_deno.js deletes `globalThis.Deno` before
 * any script runs, and a script that reaches the real global (it can) finds only the functions
 * below, each of which passes through validated ops.
 */
const core = globalThis.Deno.core;
const ops = core.ops;

function assetName(path) {
  return String(path).replace(/^file:\/\//, "");
}

// Pyodide's wasm is compiled once per process (op_wasm_*): once it is, the loader's read of the
// 9.6 MB file gets an empty stand-in, and instantiation uses the compiled module instead.
const PYODIDE_WASM = "pyodide.asm.wasm";
const pyodideWasmBuffers = new WeakSet();

const instantiate = WebAssembly.instantiate;
WebAssembly.instantiate = async function (source, imports) {
  const buffer = source instanceof ArrayBuffer ? source : source && source.buffer;
  if (!buffer || !pyodideWasmBuffers.has(buffer)) {
    const made = await instantiate.call(this, source, imports);
    chargeInstance(made instanceof WebAssembly.Instance ? made : made.instance, imports);
    return made;
  }
  let module = ops.op_wasm_cached_module();
  if (!module) {
    module = await WebAssembly.compile(source);
    ops.op_wasm_cache_module(module);
  }
  const instance = chargeInstance(await instantiate.call(this, module, imports), imports);
  return { instance, module };
};

globalThis.read = (path) => ops.op_assets_text(assetName(path));
globalThis.readbuffer = (path) => {
  if (assetName(path).endsWith("/" + PYODIDE_WASM)) {
    const buffer = ops.op_wasm_cached_module() ? new ArrayBuffer(0) : ops.op_assets_read(assetName(path)).slice().buffer;
    pyodideWasmBuffers.add(buffer);
    return buffer;
  }
  const bytes = ops.op_assets_read(assetName(path));
  // The loader wants an ArrayBuffer of exactly the file's size.
  return bytes.byteLength === bytes.buffer.byteLength ? bytes.buffer : bytes.slice().buffer;
};
globalThis.load = () => {
  throw new Error("load() is not available in the sandbox");
};
globalThis.WorkerGlobalScope = function WorkerGlobalScope() {};

globalThis.crypto = {
  getRandomValues(view) {
    ops.op_entropy_fill(new Uint8Array(view.buffer, view.byteOffset, view.byteLength));
    return view;
  },
};

globalThis.performance = { now: () => ops.op_clock_now() };

// deno_core's console prints to the process's stdout, which in `serve` is the MCP channel. Ours
// writes to the script's own captured stderr (Emscripten's and Pyodide's diagnostics use it).
function consoleWrite(...args) {
  let line;
  try {
    line = args.map((a) => (typeof a === "string" ? a : String(a))).join(" ") + "\n";
  } catch {
    line = "[console: unprintable value]\n";
  }
  ops.op_output_write(2, core.encode(line));
}
globalThis.console = Object.fromEntries(
  ["log", "info", "warn", "error", "debug", "trace"].map((name) => [name, consoleWrite]),
);

// ---- Memory --------------------------------------------------------------------------------
// ArrayBuffers and typed arrays are counted by the isolate's allocator (src/engine/memory.rs).
// V8 commits wasm memories and tables and resizable buffers by itself, so each way to make or
// grow one is wrapped here to charge the budget first; the originals stay in this closure, and
// once the sandbox is ready V8 compiles no new wasm, so no module of the script's own can grow
// memory behind these wrappers. Arguments are read once and passed on as plain values, so a
// getter cannot report one size to the check and another to V8.
const WASM_PAGE = 65536;
const TABLE_ENTRY_BYTES = 8;

function charge(bytes, what) {
  if (!ops.op_memory_charge(Number(bytes))) {
    throw new RangeError(`${what}: out of memory (the sandbox's --memory-mb budget is used up)`);
  }
}

function replaceConstructor(owner, name, construct) {
  const original = owner[name];
  const wrapped = new Proxy(original, {
    construct: (target, args, newTarget) => construct(target, args, newTarget === wrapped ? target : newTarget),
    apply: () => {
      throw new TypeError(`${name} must be called with 'new'`);
    },
  });
  Object.defineProperty(original.prototype, "constructor", { value: wrapped, writable: true, configurable: true });
  Object.defineProperty(owner, name, { value: wrapped, writable: true, configurable: true });
  return original;
}

function replaceMethod(proto, name, wrap) {
  const original = proto[name];
  Object.defineProperty(proto, name, { value: wrap(original), writable: true, configurable: true });
}

// A plain copy of a descriptor's fields, each read once (numbers stay numbers, BigInts BigInts).
function readOnce(descriptor, fields) {
  const copy = {};
  if (descriptor === null || (typeof descriptor !== "object" && typeof descriptor !== "function")) return descriptor;
  for (const field of fields) {
    const value = descriptor[field];
    if (value !== undefined) copy[field] = typeof value === "object" || typeof value === "function" ? Number(value) : value;
  }
  return copy;
}

const MEMORY_FIELDS = ["initial", "minimum", "maximum", "shared", "address", "index"];
replaceConstructor(WebAssembly, "Memory", (Memory, [descriptor], newTarget) => {
  const d = readOnce(descriptor, MEMORY_FIELDS);
  if (d && typeof d === "object") charge(Number(d.initial ?? d.minimum ?? 0) * WASM_PAGE, "WebAssembly.Memory");
  return Reflect.construct(Memory, [d], newTarget);
});
replaceMethod(WebAssembly.Memory.prototype, "grow", (grow) =>
  function (delta) {
    const pages = typeof delta === "bigint" ? delta : Number(delta);
    charge(Number(pages) * WASM_PAGE, "WebAssembly.Memory.grow");
    return grow.call(this, pages);
  },
);
// A resizable view of wasm memory grows it through ArrayBuffer.prototype.resize: not offered.
delete WebAssembly.Memory.prototype.toResizableBuffer;

const TABLE_FIELDS = ["element", "initial", "minimum", "maximum", "address", "index"];
replaceConstructor(WebAssembly, "Table", (Table, [descriptor, ...rest], newTarget) => {
  const d = readOnce(descriptor, TABLE_FIELDS);
  if (d && typeof d === "object") charge(Number(d.initial ?? d.minimum ?? 0) * TABLE_ENTRY_BYTES, "WebAssembly.Table");
  return Reflect.construct(Table, [d, ...rest], newTarget);
});
replaceMethod(WebAssembly.Table.prototype, "grow", (grow) =>
  function (delta, ...rest) {
    const entries = typeof delta === "bigint" ? delta : Number(delta);
    charge(Number(entries) * TABLE_ENTRY_BYTES, "WebAssembly.Table.grow");
    return grow.call(this, entries, ...rest);
  },
);

// An instance's own memories and tables (not imported ones) are charged once it exists.
function chargeInstance(instance, imports) {
  const imported = new Set();
  for (const module of Object.values(imports || {})) {
    for (const value of Object.values(module || {})) imported.add(value);
  }
  for (const value of Object.values(instance.exports)) {
    if (imported.has(value)) continue;
    if (value instanceof WebAssembly.Memory) charge(value.buffer.byteLength, "WebAssembly.Instance");
    else if (value instanceof WebAssembly.Table) charge(value.length * TABLE_ENTRY_BYTES, "WebAssembly.Instance");
  }
  return instance;
}
replaceConstructor(WebAssembly, "Instance", (Instance, [module, imports], newTarget) =>
  chargeInstance(Reflect.construct(Instance, [module, imports], newTarget), imports),
);

// Resizable and growable buffers reserve their maximum up front, outside the allocator.
for (const name of ["ArrayBuffer", "SharedArrayBuffer"]) {
  replaceConstructor(globalThis, name, (Buffer, [length, options], newTarget) => {
    const len = typeof length === "object" || typeof length === "function" ? Number(length) : length;
    if (options === undefined || options === null || typeof options !== "object") {
      return Reflect.construct(Buffer, [len], newTarget);
    }
    const { maxByteLength } = readOnce(options, ["maxByteLength"]);
    if (maxByteLength === undefined) return Reflect.construct(Buffer, [len], newTarget);
    charge(maxByteLength, `resizable ${name}`);
    return Reflect.construct(Buffer, [len, { maxByteLength }], newTarget);
  });
}

// ICU-backed objects live outside both the JS heap and the budget; Pyodide uses neither.
delete globalThis.Intl;
delete globalThis.Temporal;

// Zero-delay timers are what Pyodide's event loop runs on (every asyncio step, every resumed tool
// call). deno_core's timers round them up to whole milliseconds on a coarse clock; a deferred
// no-op op resolves on the event loop's very next turn instead, which is the macrotask semantics
// setTimeout(f, 0) promises. Ids are negative so clearTimeout can tell the two kinds apart.
// Each pending timer holds host memory outside the JS heap: their number is capped.
const MAX_PENDING_TIMERS = 100000;
const pendingImmediate = new Set();
const pendingTimers = new Set();
let nextImmediateId = 0;
function checkTimerRoom() {
  if (pendingImmediate.size + pendingTimers.size >= MAX_PENDING_TIMERS) {
    throw new RangeError(`setTimeout: more than ${MAX_PENDING_TIMERS} timers pending`);
  }
}
function setImmediateTask(callback, args) {
  checkTimerRoom();
  const id = --nextImmediateId;
  pendingImmediate.add(id);
  ops.op_void_async_deferred().then(() => {
    if (pendingImmediate.delete(id)) callback(...args);
  });
  return id;
}

function setTimer(callback, ms, args, repeat) {
  checkTimerRoom();
  const id = core.createTimer(
    () => {
      if (!repeat) pendingTimers.delete(id);
      callback(...args);
    },
    ms,
    undefined,
    repeat,
    true,
  );
  pendingTimers.add(id);
  return id;
}
globalThis.setTimeout = (callback, ms = 0, ...args) =>
  ms > 0 ? setTimer(callback, ms, args, false) : setImmediateTask(callback, args);
globalThis.setInterval = (callback, ms = 0, ...args) => setTimer(callback, ms, args, true);
globalThis.clearTimeout = (id) => {
  if (typeof id !== "number") return;
  if (id < 0) pendingImmediate.delete(id);
  else if (pendingTimers.delete(id)) core.cancelTimer(id);
};
globalThis.clearInterval = globalThis.clearTimeout;

const ENCODINGS = { "utf-8": "utf-8", utf8: "utf-8", latin1: "latin1", "iso-8859-1": "latin1", "utf-16le": "utf-16le" };

globalThis.TextDecoder = class TextDecoder {
  constructor(label = "utf-8", options = {}) {
    const encoding = ENCODINGS[String(label).toLowerCase()];
    if (!encoding) throw new RangeError(`TextDecoder: unsupported encoding '${label}'`);
    this.encoding = encoding;
    this.fatal = !!options.fatal;
  }
  decode(input) {
    if (input === undefined) return "";
    const bytes = ArrayBuffer.isView(input)
      ? new Uint8Array(input.buffer, input.byteOffset, input.byteLength)
      : new Uint8Array(input);
    return ops.op_text_decode(bytes, this.encoding, this.fatal);
  }
};

// core.encode's bytes live outside the array-buffer allocator: they are copied into a counted
// buffer at once, so only one uncounted copy exists, and only while encode runs.
function encodeCounted(text) {
  const bytes = core.encode(String(text));
  const counted = new Uint8Array(bytes.length);
  counted.set(bytes);
  return counted;
}

globalThis.TextEncoder = class TextEncoder {
  get encoding() {
    return "utf-8";
  }
  encode(text = "") {
    return encodeCounted(text);
  }
  encodeInto(text, dest) {
    const bytes = core.encode(String(text));
    const written = Math.min(bytes.length, dest.length);
    dest.set(bytes.subarray(0, written));
    return { read: String(text).length, written };
  }
};

const B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
globalThis.btoa = (binary) => {
  let out = "";
  for (let i = 0; i < binary.length; i += 3) {
    const a = binary.charCodeAt(i), b = binary.charCodeAt(i + 1), c = binary.charCodeAt(i + 2);
    out += B64[a >> 2] + B64[((a & 3) << 4) | (b >> 4 || 0)];
    out += i + 1 < binary.length ? B64[((b & 15) << 2) | (c >> 6 || 0)] : "=";
    out += i + 2 < binary.length ? B64[c & 63] : "=";
  }
  return out;
};
