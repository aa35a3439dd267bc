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
 * Nothing here is Pyodide-specific beyond the names above; no other host file is reachable.
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
  if (!buffer || !pyodideWasmBuffers.has(buffer)) return instantiate.call(this, source, imports);
  let module = ops.op_wasm_cached_module();
  if (!module) {
    module = await WebAssembly.compile(source);
    ops.op_wasm_cache_module(module);
  }
  const instance = await instantiate.call(this, module, imports);
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

// Zero-delay timers are what Pyodide's event loop runs on (every asyncio step, every resumed tool
// call). deno_core's timers round them up to whole milliseconds on a coarse clock; a deferred
// no-op op resolves on the event loop's very next turn instead, which is the macrotask semantics
// setTimeout(f, 0) promises. Ids are negative so clearTimeout can tell the two kinds apart.
const pendingImmediate = new Set();
let nextImmediateId = 0;
function setImmediateTask(callback, args) {
  const id = --nextImmediateId;
  pendingImmediate.add(id);
  ops.op_void_async_deferred().then(() => {
    if (pendingImmediate.delete(id)) callback(...args);
  });
  return id;
}

globalThis.setTimeout = (callback, ms = 0, ...args) =>
  ms > 0
    ? core.createTimer(() => callback(...args), ms, undefined, false, true)
    : setImmediateTask(callback, args);
globalThis.setInterval = (callback, ms = 0, ...args) =>
  core.createTimer(() => callback(...args), ms, undefined, true, true);
globalThis.clearTimeout = (id) => {
  if (typeof id !== "number") return;
  if (id < 0) pendingImmediate.delete(id);
  else core.cancelTimer(id);
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

globalThis.TextEncoder = class TextEncoder {
  get encoding() {
    return "utf-8";
  }
  encode(text = "") {
    return core.encode(String(text));
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
