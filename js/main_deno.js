/*
 * main_deno.js — the sandbox's entry module inside the deno_core isolate.
 *
 * Boot Pyodide, tell Rust it is ready, then run jobs as they come, reporting each outcome, until
 * Rust says no more will come. A sandbox runs one job, or the jobs of one session in order (each
 * sees what the previous ones left): never jobs of two sessions, so nothing leaks between them.
 *
 * Each outcome is reported with the token that came with its job, which only this module holds.
 *
 * The ops it calls, and host_deno.js's, are listed by family in crates/sandbox/src/bridge/mod.rs
 * (a test keeps that list, the extension's and what the JS calls the same).
 */
import { encodeCounted } from "./host_deno.js"; // must evaluate before pyodide.mjs: see its header
import { loadPyodide } from "../pyodide/pyodide.mjs";
import createPyodideModule from "../pyodide/pyodide.asm.mjs";
import { bootSandbox, runJob, warmSteps } from "./runner.js";

const ops = globalThis.Deno.core.ops;
// From here on the ops live only in closures (this module's and host_deno.js's). Pyodide's
// modules have already looked for `Deno` (they evaluate first), and never use it.
delete globalThis.Deno;
delete globalThis.__bootstrap;
if ("Deno" in globalThis || "__bootstrap" in globalThis) throw new Error("could not seal the sandbox's global");
const settings = ops.op_sandbox_settings();

// Strings reach the tool ops as bytes in counted buffers: the ops check a size before they
// copy anything, and no copy of a script's string escapes the memory budget.
const host = {
  writeOutput: (stream, bytes) => ops.op_output_write(stream, bytes),
  callTool: (server, tool, argsJson) =>
    ops.op_tools_call(encodeCounted(server), encodeCounted(tool), encodeCounted(argsJson)),
  catalogJson: () => ops.op_tools_catalog(),
  serverToolsJson: (server) => ops.op_tools_server_catalog(encodeCounted(server)),
  serverReady: (server) => ops.op_tools_server_ready(encodeCounted(server)),
  wheelLock: () => ops.op_wheels_lock(),
  wheelIndex: (fileName) => {
    const index = ops.op_wheels_index(encodeCounted(fileName));
    return index ? JSON.parse(index) : null;
  },
  // The op unpacks the file straight into `dest` (the runner's buffer, or wasm memory itself).
  wheelMember: (fileName, i, dest) => {
    let name = wheelNames.get(fileName);
    if (!name) wheelNames.set(fileName, (name = encodeCounted(fileName)));
    return ops.op_wheels_member_fill(name, i, dest);
  },
};

// A wheel's name, encoded once for all its files.
const wheelNames = new Map();

// Boots Pyodide, from the snapshot if there is one. The snapshot's bytes (31 MB) are dead once
// restored into wasm memory; in a function of its own, no register of this module's frame (which
// never ends) keeps them, as one did, and detaching their buffer frees them whoever else holds
// one. A zygote would otherwise keep them, and every child would get them in its page tables
// (tests/fork.rs looks for them in a child's memory).
async function boot() {
  const snapshot = settings.restoreSnapshot ? ops.op_snapshot_read() : undefined;
  try {
    return await bootSandbox(
      { ...settings, snapshot, indexURL: "/pyodide/", loadPyodide, createPyodideModule },
      host,
    );
  } finally {
    if (snapshot) snapshot.buffer.transfer(0);
  }
}

let pyodide;
try {
  pyodide = await boot();
  if (settings.makeSnapshot) ops.op_snapshot_save(pyodide.makeMemorySnapshot());
} catch (e) {
  ops.op_sandbox_ready(`Pyodide failed to boot: ${e && e.stack ? e.stack : e}`);
  throw e;
}
ops.op_sandbox_ready("");
// In a zygote, warm-up steps run until a fork is asked for; the child then goes on to its job.
const warm = warmSteps(pyodide);
while (await ops.op_sandbox_idle(warm.roundDone)) await warm.step();
for (let next; (next = await ops.op_sandbox_next_job()) !== ""; ) {
  const { token, job } = JSON.parse(next);
  ops.op_sandbox_report(token, await runJob(pyodide, job));
}
