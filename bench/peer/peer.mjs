// The Deno + Pyodide peer `cargo xtask bench` compares against: Pyodide loaded by Deno from
// node_modules, as the Deno-based code-mode servers run it. `cargo xtask bench` copies this file
// into the peer folder (bench/peer/setup.sh installs deno and pyodide@314.0.8 there) and runs it
// with read access to that folder only: no network, no environment, no writes.
//
//   deno run --allow-read=DIR DIR/bench-peer.mjs cold
//       loads Pyodide, runs print(1), writes {"stdout": ...} and exits (the cold-start sample).
//   deno run --allow-read=DIR DIR/bench-peer.mjs serve
//       loads Pyodide once, writes {"ready": true}, then answers one JSON line per request line:
//       {"code": "..."}               -> {"stdout", "result", "error"}: one runPython
//       {"code": "...", "repeat": n}  -> {"ms": [...]}: n runPython calls timed in-process
import { loadPyodide } from "./node_modules/pyodide/pyodide.mjs";

let captured = "";
// Pyodide guesses its folder from a stack trace, which Deno's source maps can redirect: name it.
const indexURL = decodeURIComponent(new URL("./node_modules/pyodide/", import.meta.url).pathname);
const pyodide = await loadPyodide({
  indexURL,
  stdout: (line) => {
    captured += line + "\n";
  },
  stderr: (line) => {
    captured += line + "\n";
  },
});

function run(code) {
  captured = "";
  let result = null;
  let error = null;
  try {
    let value = pyodide.runPython(code);
    if (value && typeof value.toJs === "function") {
      const proxy = value;
      value = proxy.toJs();
      proxy.destroy();
    }
    result = typeof value === "bigint" ? value.toString() : value ?? null;
  } catch (e) {
    error = String(e && e.message ? e.message : e);
  }
  return { stdout: captured, result, error };
}

const encoder = new TextEncoder();
function writeLine(value) {
  const bytes = encoder.encode(JSON.stringify(value) + "\n");
  let written = 0;
  while (written < bytes.length) {
    written += Deno.stdout.writeSync(bytes.subarray(written));
  }
}

const mode = Deno.args[0] ?? "cold";
if (mode === "cold") {
  writeLine(run("print(1)"));
} else if (mode === "serve") {
  writeLine({ ready: true });
  const decoder = new TextDecoder();
  let pending = "";
  for await (const chunk of Deno.stdin.readable) {
    pending += decoder.decode(chunk, { stream: true });
    let newline;
    while ((newline = pending.indexOf("\n")) >= 0) {
      const line = pending.slice(0, newline);
      pending = pending.slice(newline + 1);
      if (!line.trim()) continue;
      const request = JSON.parse(line);
      if (request.repeat) {
        const ms = [];
        for (let i = 0; i < request.repeat; i++) {
          const started = performance.now();
          run(request.code);
          ms.push(performance.now() - started);
        }
        writeLine({ ms });
      } else {
        writeLine(run(request.code));
      }
    }
  }
} else {
  console.error(`bench-peer.mjs: unknown mode '${mode}' (use cold or serve)`);
  Deno.exit(2);
}
