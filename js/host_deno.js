/*
 * host_deno.js — the few browser/shell globals Pyodide needs, for a bare deno_core isolate.
 *
 * Imported first by main_deno.js: Pyodide's loader decides which environment it is in while its
 * module evaluates, so these must exist before `pyodide.mjs` runs. `read` + `load` send the loader
 * down its "shell" path (files through `readbuffer`, no fetch, no URL); `WorkerGlobalScope` keeps
 * the Emscripten glue off its d8 path (whose random source would be `os.system`).
 *
 * Everything that touches the host goes through a Rust op that validates its own arguments (the
 * op families and the JS using each: crates/sandbox/src/bridge/mod.rs): Pyodide's pinned files
 * only, seeded or fresh randomness (the sandbox's only entropy), a monotonic clock, text decoding
 * (utf-8 / latin1 / utf-16le, `fatal`), Pyodide's wasm compiled once per process and wheelhouse
 * packages' own wasm by sha256, `console` writes to the script's captured stderr, the memory
 * budget (see "Memory" below); and deno_core's `op_void_async_deferred` (next event-loop turn).
 * Nothing here is Pyodide-specific beyond the file names; no other host file is reachable.
 *
 * The ops are held in this module's closures only: main_deno.js deletes `globalThis.Deno` before
 * any script runs, and a script that reaches the real global (it can) finds only the functions
 * below, each of which passes through validated ops.
 */
const core = globalThis.Deno.core;
const ops = core.ops;
const ObjectDefinePropertyEarly = Object.defineProperty;

function assetName(path) {
  return String(path).replace(/^file:\/\//, "");
}

// Pyodide's wasm is compiled once per process (op_wasm_*): once it is, the loader's read of the
// 9.6 MB file gets an empty stand-in, and instantiation uses the compiled module instead.
const PYODIDE_WASM = "pyodide.asm.wasm";
const pyodideWasmBuffers = new WeakSet();

// Once the sandbox is ready V8 compiles no wasm, except the wasm modules of the wheelhouse's
// packages (an extension module's `.so`, loaded when Python imports it): op_wasm_compile_listed
// compiles those, and only those, whatever route Emscripten's loader takes to compile one.
const compile = WebAssembly.compile;
function listedModule(source) {
  if (source instanceof ModuleOf || !source || typeof source !== "object") return undefined;
  try {
    return ops.op_wasm_compile_listed(source) || undefined;
  } catch {
    return undefined;
  }
}
WebAssembly.compile = async function (source) {
  return listedModule(source) || ReflectApply(compile, this, [source]);
};
const ModuleOf = WebAssembly.Module;
const WasmModule = new Proxy(ModuleOf, {
  construct: (target, args, newTarget) =>
    listedModule(args[0]) || ReflectConstruct(target, args, newTarget === WasmModule ? target : newTarget),
});
ObjectDefinePropertyEarly(ModuleOf.prototype, "constructor", { value: WasmModule, writable: true, configurable: true });
ObjectDefinePropertyEarly(WebAssembly, "Module", { value: WasmModule, writable: true, configurable: true });

const instantiate = WebAssembly.instantiate;
WebAssembly.instantiate = async function (source, imports) {
  const buffer = source instanceof ArrayBuffer ? source : source && source.buffer;
  if (!buffer || !pyodideWasmBuffers.has(buffer)) {
    const listed = listedModule(source);
    if (listed) {
      const instance = chargeInstance(await ReflectApply(instantiate, this, [listed, imports]), listed, imports);
      return { instance, module: listed };
    }
    const made = await ReflectApply(instantiate, this, [source, imports]);
    if (brand(instanceExports, made)) chargeInstance(made, source, imports);
    else chargeInstance(made.instance, made.module, imports);
    return made;
  }
  let module = ops.op_wasm_cached_module();
  if (!module) {
    module = await ReflectApply(compile, WebAssembly, [source]);
    ops.op_wasm_cache_module(module);
  }
  const instance = chargeInstance(await ReflectApply(instantiate, this, [module, imports]), module, imports);
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

// What the wrappers below run on, captured before any script can replace it (a script may patch
// any shared built-in: `Number`, `Function.prototype.call`, `Reflect.construct`, `Set.prototype.has`,
// the `buffer` getter...). They use only these, index loops, and null-prototype objects.
const ReflectApply = Reflect.apply;
const ReflectConstruct = Reflect.construct;
const NumberOf = Number;
const ObjectCreate = Object.create;
const ObjectValues = Object.values;
const ObjectDefineProperty = Object.defineProperty;
const getter = (proto, name) => Object.getOwnPropertyDescriptor(proto, name).get;
const memoryBuffer = getter(WebAssembly.Memory.prototype, "buffer");
const tableLength = getter(WebAssembly.Table.prototype, "length");
const instanceExports = getter(WebAssembly.Instance.prototype, "exports");
const moduleExports = WebAssembly.Module.exports;
const bufferByteLength = getter(ArrayBuffer.prototype, "byteLength");
const sharedBufferByteLength = getter(SharedArrayBuffer.prototype, "byteLength");

function charge(bytes, what) {
  if (!ops.op_memory_charge(NumberOf(bytes))) {
    throw new RangeError(`${what}: out of memory (the sandbox's --memory-mb budget is used up)`);
  }
}

// A brand check that no script can fool: the original getter throws on anything else.
function brand(get, value) {
  try {
    ReflectApply(get, value, []);
    return true;
  } catch {
    return false;
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
  ObjectDefineProperty(original.prototype, "constructor", { value: wrapped, writable: true, configurable: true });
  ObjectDefineProperty(owner, name, { value: wrapped, writable: true, configurable: true });
}

function replaceMethod(proto, name, wrap) {
  ObjectDefineProperty(proto, name, { value: wrap(proto[name]), writable: true, configurable: true });
}

// A null-prototype copy of a descriptor's fields, each read once (numbers stay numbers, BigInts
// BigInts): no getter can show one size to the check and another to V8, and no setter or getter
// on Object.prototype can intercept the copy.
function readOnce(descriptor, fields) {
  if (descriptor === null || (typeof descriptor !== "object" && typeof descriptor !== "function")) return descriptor;
  const copy = ObjectCreate(null);
  for (let i = 0; i < fields.length; i++) {
    const value = descriptor[fields[i]];
    if (value !== undefined) copy[fields[i]] = typeof value === "object" || typeof value === "function" ? NumberOf(value) : value;
  }
  return copy;
}

const pageCount = (delta) => (typeof delta === "bigint" ? delta : NumberOf(delta));

const MEMORY_FIELDS = ["initial", "minimum", "maximum", "shared", "address", "index"];
replaceConstructor(WebAssembly, "Memory", (Memory, args, newTarget) => {
  const d = readOnce(args[0], MEMORY_FIELDS);
  if (d && typeof d === "object") charge(NumberOf(d.initial ?? d.minimum ?? 0) * WASM_PAGE, "WebAssembly.Memory");
  return ReflectConstruct(Memory, [d], newTarget);
});
replaceMethod(WebAssembly.Memory.prototype, "grow", (grow) =>
  function (delta) {
    const pages = pageCount(delta);
    charge(NumberOf(pages) * WASM_PAGE, "WebAssembly.Memory.grow");
    return ReflectApply(grow, this, [pages]);
  },
);
// A resizable view of wasm memory grows it through ArrayBuffer.prototype.resize: not offered.
delete WebAssembly.Memory.prototype.toResizableBuffer;

const TABLE_FIELDS = ["element", "initial", "minimum", "maximum", "address", "index"];
replaceConstructor(WebAssembly, "Table", (Table, args, newTarget) => {
  const d = readOnce(args[0], TABLE_FIELDS);
  if (d && typeof d === "object") charge(NumberOf(d.initial ?? d.minimum ?? 0) * TABLE_ENTRY_BYTES, "WebAssembly.Table");
  return ReflectConstruct(Table, args.length > 1 ? [d, args[1]] : [d], newTarget);
});
replaceMethod(WebAssembly.Table.prototype, "grow", (grow) =>
  function (delta, value) {
    const entries = pageCount(delta);
    charge(NumberOf(entries) * TABLE_ENTRY_BYTES, "WebAssembly.Table.grow");
    return ReflectApply(grow, this, arguments.length > 1 ? [entries, value] : [entries]);
  },
);

// An instance's own memories and tables (not imported ones) are charged once it exists. Which
// exports those are, V8 says from the module itself (`WebAssembly.Module.exports`, kinds read
// from the binary): Pyodide's instance exports thousands of functions and globals, and a brand
// check of each would throw (and build an Error with a stack trace) thousands of times per boot.
function chargeInstance(instance, module, imports) {
  const imported = [];
  const modules = ObjectValues(imports || {});
  for (let i = 0; i < modules.length; i++) {
    const values = ObjectValues(modules[i] || {});
    for (let j = 0; j < values.length; j++) imported[imported.length] = values[j];
  }
  // V8 makes the exports object: frozen, with a null prototype, so reading it runs no script.
  const exports = ReflectApply(instanceExports, instance, []);
  const kinds = ReflectApply(moduleExports, undefined, [module]);
  for (let i = 0; i < kinds.length; i++) {
    const kind = kinds[i].kind;
    if (kind !== "memory" && kind !== "table") continue;
    const value = exports[kinds[i].name];
    let isImported = false;
    for (let j = 0; j < imported.length && !isImported; j++) isImported = imported[j] === value;
    if (isImported) continue;
    if (brand(memoryBuffer, value)) {
      const buffer = ReflectApply(memoryBuffer, value, []);
      const bytes = brand(bufferByteLength, buffer)
        ? ReflectApply(bufferByteLength, buffer, [])
        : ReflectApply(sharedBufferByteLength, buffer, []);
      charge(bytes, "WebAssembly.Instance");
    } else if (brand(tableLength, value)) {
      charge(ReflectApply(tableLength, value, []) * TABLE_ENTRY_BYTES, "WebAssembly.Instance");
    }
  }
  return instance;
}
replaceConstructor(WebAssembly, "Instance", (Instance, args, newTarget) =>
  chargeInstance(ReflectConstruct(Instance, [args[0], args[1]], newTarget), args[0], args[1]),
);

// Resizable and growable buffers reserve their maximum up front, outside the allocator.
for (const name of ["ArrayBuffer", "SharedArrayBuffer"]) {
  replaceConstructor(globalThis, name, (Buffer, args, newTarget) => {
    const length = args[0];
    const options = args[1];
    const len = typeof length === "object" || typeof length === "function" ? NumberOf(length) : length;
    if (options === undefined || options === null || typeof options !== "object") {
      return ReflectConstruct(Buffer, [len], newTarget);
    }
    const { maxByteLength } = readOnce(options, ["maxByteLength"]);
    if (maxByteLength === undefined) return ReflectConstruct(Buffer, [len], newTarget);
    charge(maxByteLength, `resizable ${name}`);
    const resizable = ObjectCreate(null);
    resizable.maxByteLength = maxByteLength;
    return ReflectConstruct(Buffer, [len, resizable], newTarget);
  });
}

// ICU-backed objects live outside both the JS heap and the budget; Pyodide uses neither.
delete globalThis.Intl;
delete globalThis.Temporal;

// Zero-delay timers are what Pyodide's event loop runs on (every asyncio step, every resumed tool
// call). deno_core's timers round them up to whole milliseconds on a coarse clock; a deferred
// no-op op resolves on the event loop's very next turn instead, which is the macrotask semantics
// setTimeout(f, 0) promises. Ids are negative so clearTimeout can tell the two kinds apart.
// Each pending timer holds host memory outside the JS heap: their number is capped. Kept in
// null-prototype objects with a counter, so no patched Set method can hide one from the count.
const MAX_PENDING_TIMERS = 100000;
const pendingImmediate = Object.create(null);
const pendingTimers = Object.create(null);
let pendingCount = 0;
let nextImmediateId = 0;
function track(table, id) {
  table[id] = true;
  pendingCount++;
}
function untrack(table, id) {
  if (table[id] !== true) return false;
  delete table[id];
  pendingCount--;
  return true;
}
function checkTimerRoom() {
  if (pendingCount >= MAX_PENDING_TIMERS) {
    throw new RangeError(`setTimeout: more than ${MAX_PENDING_TIMERS} timers pending`);
  }
}
function setImmediateTask(callback, args) {
  checkTimerRoom();
  const id = --nextImmediateId;
  track(pendingImmediate, id);
  ops.op_void_async_deferred().then(() => {
    if (untrack(pendingImmediate, id)) callback(...args);
  });
  return id;
}

function setTimer(callback, ms, args, repeat) {
  checkTimerRoom();
  const id = core.createTimer(
    () => {
      if (!repeat) untrack(pendingTimers, id);
      callback(...args);
    },
    ms,
    undefined,
    repeat,
    true,
  );
  track(pendingTimers, id);
  return id;
}
globalThis.setTimeout = (callback, ms = 0, ...args) =>
  ms > 0 ? setTimer(callback, ms, args, false) : setImmediateTask(callback, args);
globalThis.setInterval = (callback, ms = 0, ...args) => setTimer(callback, ms, args, true);
globalThis.clearTimeout = (id) => {
  if (typeof id !== "number") return;
  if (id < 0) untrack(pendingImmediate, id);
  else if (untrack(pendingTimers, id)) core.cancelTimer(id);
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
const Uint8ArrayOf = Uint8Array;
const typedArraySet = Object.getPrototypeOf(Uint8Array.prototype).set;
export function encodeCounted(text) {
  const bytes = core.encode(String(text));
  const counted = new Uint8ArrayOf(bytes.length);
  ReflectApply(typedArraySet, counted, [bytes]);
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
    // As the Encoding standard says: only whole UTF-8 sequences are written, and `read` counts
    // the UTF-16 code units they came from.
    const bytes = encodeCounted(text);
    let written = Math.min(bytes.length, dest.length);
    if (written < bytes.length) {
      while (written > 0 && (bytes[written] & 0xc0) === 0x80) written--;
    }
    let read = 0;
    for (let i = 0; i < written; i++) {
      const byte = bytes[i];
      if ((byte & 0xc0) !== 0x80) read += byte >= 0xf0 ? 2 : 1;
    }
    dest.set(bytes.subarray(0, written));
    return { read, written };
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
