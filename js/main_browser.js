/*
 * main_browser.js — the browser host for parity runs (`mcp-code-mode parity`): the same runner.js
 * and the same pinned Pyodide files as the V8 host, in headless Chromium.
 *
 * This one file plays two parts:
 *   - in the page (served by src/parity/http.rs at /run/<token>/), it is the controller the Rust
 *     driver talks to over CDP: `globalThis.codemodeParity.boot()`, `.run(job)`, `.stop()`;
 *   - in a module Worker the page starts from this same URL, it boots Pyodide and runs the job.
 * Pyodide runs in a worker because that is what the V8 host looks like to Emscripten (host_deno.js
 * defines WorkerGlobalScope), because synchronous XMLHttpRequest (entropy, the catalogue) is a
 * first-class API there, and because a runaway script can then be stopped by terminating the
 * worker while the page keeps answering.
 *
 * The worker reaches Rust only through the run's endpoints (relative to the page's URL):
 *   GET  settings        engine::BootSettings: exactly what the V8 host boots with
 *   GET  entropy?n=N     N bytes of the run's seeded stream (crypto.getRandomValues, synchronous)
 *   GET  catalog         the tool catalogue's index Python sees (synchronous, like op_tools_catalog)
 *   POST server-tools    one server's tools, the name as the body (like op_tools_server_catalog)
 *   POST tool            {server, tool, arguments_json} -> the same JSON envelope as op_tools_call
 *   POST output          framed stdout/stderr bytes, capped on the Rust side like op_output_write
 *   GET  snapshot        the V8 host's Pyodide memory snapshot, when settings.restoreSnapshot
 */
import { bootSandbox, runJob } from "./runner.js";

const IN_WORKER = typeof WorkerGlobalScope !== "undefined" && globalThis instanceof WorkerGlobalScope;

if (IN_WORKER) {
  startWorker();
} else {
  startPage();
}

// ---------------------------------------------------------------------------------------------
// the page: a thin controller, so that CDP never waits on the thread Python runs on

function startPage() {
  const base = new URL(".", location.href).href;
  let worker = null;
  let pending = null; // {resolve, reject} of the boot or run in flight

  function settle(fn, value) {
    const p = pending;
    pending = null;
    if (p) p[fn](value);
  }

  function request(message) {
    if (pending) return Promise.reject(new Error("the browser host is busy with another request"));
    return new Promise((resolve, reject) => {
      pending = { resolve, reject };
      worker.postMessage(message);
    });
  }

  globalThis.codemodeParity = {
    /** Starts the worker and boots Pyodide in it: "" when ready, else why not. */
    boot() {
      if (worker) return Promise.reject(new Error("boot() was already called"));
      worker = new Worker(import.meta.url, { type: "module", name: "codemode" });
      worker.onmessage = (event) => {
        const m = event.data;
        if (m.kind === "ready") settle("resolve", m.error);
        else if (m.kind === "done") settle("resolve", m.outcome);
        else if (m.kind === "failed") settle("reject", new Error(m.error));
      };
      worker.onerror = (event) => {
        event.preventDefault();
        settle("reject", new Error(`the worker failed: ${event.message || "unknown error"}`));
      };
      return request({ kind: "boot", base });
    },
    /** Runs one job ({code, filename}) and resolves to runner.js's outcome JSON. */
    run(job) {
      if (!worker) return Promise.reject(new Error("run() before boot()"));
      return request({ kind: "run", job });
    },
    /** Stops the worker wherever it is (the timeout path). */
    stop() {
      if (worker) worker.terminate();
      settle("reject", new Error("stopped"));
    },
    /** What Emscripten derives LANG from: named in the report when it explains a difference. */
    language: globalThis.navigator ? navigator.language : "",
  };
}

// ---------------------------------------------------------------------------------------------
// the worker: the browser's equivalent of host_deno.js + main_deno.js

function startWorker() {
  let pyodide = null;
  let base = "";

  onmessage = async (event) => {
    const m = event.data;
    try {
      if (m.kind === "boot") {
        base = m.base;
        postMessage({ kind: "ready", error: await boot() });
      } else if (m.kind === "run") {
        output.last = 0; // the job's first line goes out at once
        const outcome = await runJob(pyodide, m.job);
        output.flush();
        postMessage({ kind: "done", outcome });
      }
    } catch (e) {
      output.flush();
      postMessage({ kind: "failed", error: String(e && e.stack ? e.stack : e) });
    }
  };

  /** A synchronous request: Emscripten asks for entropy (and codemode.py for the catalogue)
   * from synchronous code, so these cannot be promises. */
  function syncRequest(method, path, body) {
    const xhr = new XMLHttpRequest();
    xhr.open(method, base + path, false);
    xhr.responseType = "arraybuffer";
    xhr.send(body === undefined ? null : body);
    if (xhr.status !== 200) {
      const detail = new TextDecoder().decode(xhr.response || new ArrayBuffer(0));
      throw new Error(`${method} ${path}: HTTP ${xhr.status} ${detail}`);
    }
    return new Uint8Array(xhr.response);
  }

  /** Web Crypto's getRandomValues, drawn from the run's seeded stream on the Rust side (the same
   * ChaCha20 stream op_entropy_fill serves the V8 host), so both hosts see identical bytes. */
  function installEntropy() {
    const getRandomValues = (view) => {
      if (!ArrayBuffer.isView(view) || view instanceof Float32Array || view instanceof Float64Array || view instanceof DataView) {
        throw new TypeError("getRandomValues: expected an integer typed array");
      }
      if (view.byteLength > 65536) {
        throw new RangeError("getRandomValues: at most 65536 bytes at a time");
      }
      if (view.byteLength > 0) {
        const bytes = syncRequest("GET", `entropy?n=${view.byteLength}`);
        new Uint8Array(view.buffer, view.byteOffset, view.byteLength).set(bytes);
      }
      return view;
    };
    Object.defineProperty(globalThis.crypto, "getRandomValues", {
      value: getRandomValues,
      writable: true,
      configurable: true,
    });
  }

  /** In a browser Pyodide streams its wasm (instantiateStreaming), which would bypass runner.js's
   * memory cap (it wraps WebAssembly.instantiate, the only path the V8 host takes). Route the
   * stream through instantiate so both hosts run under the same cap. */
  function routeStreamingThroughInstantiate() {
    WebAssembly.instantiateStreaming = async (source, imports) => {
      const response = await source;
      return WebAssembly.instantiate(await response.arrayBuffer(), imports);
    };
  }

  /** stdout/stderr, sent to Rust in order; Rust applies the V8 host's cap to the bytes, so
   * truncation notices are identical. A write goes out at once unless another went out less than
   * BATCH_MS ago (a print flood must not cost one request a line); the batch then leaves with the
   * next write, at 64 KiB, before a tool call, or at the end. So a script stopped at its timeout
   * keeps all it printed but, at worst, its last BATCH_MS of output before it hung. */
  const BATCH_MS = 20;
  const output = {
    chunks: [],
    size: 0,
    last: 0,
    write(stream, bytes) {
      this.chunks.push([stream, bytes.slice()]);
      this.size += bytes.length + 5;
      const now = Date.now();
      if (this.size >= 1 << 16 || now - this.last >= BATCH_MS) this.flush(now);
    },
    flush(now = Date.now()) {
      this.last = now;
      if (this.chunks.length === 0) return;
      const body = new Uint8Array(this.size);
      const view = new DataView(body.buffer);
      let at = 0;
      for (const [stream, bytes] of this.chunks) {
        body[at] = stream;
        view.setUint32(at + 1, bytes.length, true);
        body.set(bytes, at + 5);
        at += bytes.length + 5;
      }
      this.chunks = [];
      this.size = 0;
      syncRequest("POST", "output", body);
    },
  };

  const host = {
    writeOutput: (stream, bytes) => output.write(stream, bytes),
    callTool: async (server, tool, argsJson) => {
      // What was printed before a call that never returns (the timeout path) is already kept.
      output.flush();
      try {
        const response = await fetch(base + "tool", {
          method: "POST",
          headers: { "content-type": "application/json" },
          body: JSON.stringify({ server, tool, arguments_json: argsJson }),
        });
        if (!response.ok) throw new Error(`HTTP ${response.status} ${await response.text()}`);
        return await response.text();
      } catch (e) {
        return JSON.stringify({ ok: false, error: `the browser host could not reach the hub: ${e}`, kind: "server" });
      }
    },
    catalogJson: () => new TextDecoder().decode(syncRequest("GET", "catalog")),
    serverToolsJson: (server) => new TextDecoder().decode(syncRequest("POST", "server-tools", server)),
    // The same wheels the V8 host embeds, from the parity server (a file name as the body). A
    // wheel's files come unpacked in one request, the first time one of them is read.
    wheelLock: () => new TextDecoder().decode(syncRequest("GET", "wheel-lock")),
    wheelIndex: (fileName) => {
      const index = JSON.parse(new TextDecoder().decode(syncRequest("POST", "wheel-index", fileName)));
      wheelIndexes.set(fileName, index);
      return index;
    },
    wheelMember: (fileName, i, dest) => {
      let files = wheelFiles.get(fileName);
      if (!files) {
        const bytes = syncRequest("POST", "wheel-files", fileName);
        files = [];
        let at = 0;
        for (const [, length] of wheelIndexes.get(fileName) ?? []) {
          files.push(bytes.subarray(at, at + length));
          at += length;
        }
        wheelFiles.set(fileName, files);
      }
      const bytes = files[i];
      if (!bytes || bytes.length !== dest.length) return false;
      dest.set(bytes);
      return true;
    },
  };
  const wheelIndexes = new Map();
  const wheelFiles = new Map();

  async function boot() {
    try {
      installEntropy();
      routeStreamingThroughInstantiate();
      const settings = JSON.parse(new TextDecoder().decode(syncRequest("GET", "settings")));
      const snapshot = settings.restoreSnapshot ? syncRequest("GET", "snapshot") : undefined;
      // Imported only now, after the shims: Pyodide's modules look at the globals as they load.
      const { loadPyodide } = await import("/pyodide/pyodide.mjs");
      const { default: createPyodideModule } = await import("/pyodide/pyodide.asm.mjs");
      pyodide = await bootSandbox(
        { ...settings, snapshot, indexURL: "/pyodide/", loadPyodide, createPyodideModule },
        host,
      );
      output.flush();
      return "";
    } catch (e) {
      return `Pyodide failed to boot: ${e && e.stack ? e.stack : e}`;
    }
  }
}
