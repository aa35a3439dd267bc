/*
 * runner.js — boots Pyodide and runs one job. Host-neutral: the same file runs in the deno_core
 * isolate (main_deno.js) and in a browser page (main_browser.js), so nothing here may assume
 * either. What differs between hosts arrives as the `host` object:
 *
 *   host.writeOutput(stream, bytes)      stream 1 = stdout, 2 = stderr; bytes is a Uint8Array view
 *   host.callTool(server, tool, json)    -> Promise<string> (a JSON envelope, see codemode.py)
 *   host.catalogJson()                   -> string: the index of servers Python may call (no tools yet)
 *   host.serverToolsJson(server)         -> string: that server's tools, read when Python first touches it
 *   host.serverReady(server)             -> Promise<string>: "" once a starting server is up, else why not
 *                                           (optional: a host whose servers are ready at once omits it)
 *   host.wheelLock()                     -> string: the wheelhouse's lock (Pyodide's format)
 *   host.wheelIndex(fileName)            -> [[path, size], …]: the files of a wheel (or of its
 *                                           bytecode zip), or null if the host has no such file
 *   host.wheelMember(fileName, i, dest) -> bool: puts the bytes of the index's i-th file into
 *                                           `dest` (a Uint8Array of its size); false if it cannot
 *
 * The Python half of the bridge is codemode.py; its source is handed in as `preludeSource`.
 */

/**
 * Refuses linear-memory growth past `maxBytes`: Python then sees a clean MemoryError. V8's own
 * heap limits do not cover wasm memory. The check sits on the instance's memory itself, so every
 * growth path is held to it (Emscripten's resize_heap and growMemory, which over-grow by up to
 * 20% when they can), and both hosts refuse at exactly the same size.
 */
function capWasmMemory(maxBytes) {
  const instantiate = WebAssembly.instantiate;
  WebAssembly.instantiate = async function (source, imports) {
    const made = await instantiate.call(this, source, imports);
    const instance = made instanceof WebAssembly.Instance ? made : made.instance;
    const memory = instance && instance.exports.memory;
    if (memory instanceof WebAssembly.Memory && !Object.hasOwn(memory, "grow")) {
      const grow = memory.grow;
      Object.defineProperty(memory, "grow", {
        value(delta) {
          const pages = Number(delta);
          if (!(pages >= 0) || this.buffer.byteLength + pages * 65536 > maxBytes) {
            throw new RangeError("WebAssembly.Memory.grow(): past the sandbox's memory cap");
          }
          return grow.call(this, pages);
        },
      });
    }
    return made;
  };
}

/**
 * What Python's `js` module shows: ECMAScript's own built-ins, the same in every host, and none of
 * the host's extras (`readbuffer`, `Deno`, `document`, `fetch`, ...).
 */
const STANDARD_GLOBALS = [
  "Object", "Function", "Array", "Number", "Boolean", "String", "Symbol", "BigInt", "Math", "JSON",
  "Date", "RegExp", "Error", "TypeError", "RangeError", "SyntaxError", "Promise", "Map", "Set",
  "WeakMap", "WeakSet", "Proxy", "Reflect", "ArrayBuffer", "DataView", "Int8Array", "Uint8Array",
  "Uint8ClampedArray", "Int16Array", "Uint16Array", "Int32Array", "Uint32Array", "Float32Array",
  "Float64Array", "BigInt64Array", "BigUint64Array", "parseInt", "parseFloat", "isNaN", "isFinite",
  "encodeURIComponent", "decodeURIComponent", "encodeURI", "decodeURI", "NaN", "Infinity", "undefined",
];

function standardGlobals() {
  const globals = Object.create(null);
  for (const name of STANDARD_GLOBALS) globals[name] = globalThis[name];
  globals.globalThis = globals;
  return globals;
}

const LOAD_PRELUDE =
  "import sys, types\n" +
  "_m = types.ModuleType('codemode')\n" +
  "_m.__file__ = '<codemode>'\n" +
  "sys.modules['codemode'] = _m\n" +
  "exec(compile(__codemode_source, '<codemode>', 'exec'), _m.__dict__)\n" +
  "del _m, __codemode_source\n";

/**
 * Boots Pyodide three ways:
 *   settings.snapshot      restore a memory snapshot made by `makeSnapshot` (the fast path);
 *   settings.makeSnapshot  boot, load the prelude, import the common modules, and stop there:
 *                          the caller then calls `pyodide.makeMemorySnapshot()`;
 *   neither                a plain boot (for comparison and debugging).
 * settings: { indexURL, env, memoryBytes, preludeSource, loadPyodide, createPyodideModule?,
 *             snapshot?, makeSnapshot?, warmUp? }
 */
export async function bootSandbox(settings, host) {
  if (settings.memoryBytes) capWasmMemory(settings.memoryBytes);
  const pyodide = await settings.loadPyodide({
    indexURL: settings.indexURL,
    createPyodideModule: settings.createPyodideModule,
    env: settings.env,
    // `js` shows only standard built-ins. Python can still reach the real globalThis through
    // Pyodide's internals, which is why every host op validates its own arguments.
    jsglobals: standardGlobals(),
    stdin: () => null,
    _makeSnapshot: !!settings.makeSnapshot,
    _loadSnapshot: settings.snapshot,
  });
  // Pyodide keeps its config for the instance's life: drop our 31 MB copy of the snapshot, now
  // restored into wasm memory, so each sandbox does not carry it twice.
  if (pyodide._api && pyodide._api.config) pyodide._api.config._loadSnapshot = undefined;
  if (!settings.snapshot) {
    pyodide.globals.set("__codemode_source", settings.preludeSource);
    pyodide.runPython(LOAD_PRELUDE);
  }
  if (settings.makeSnapshot) {
    // Nothing host-specific may be referenced from Python before the snapshot is taken.
    pyodide.runPython("import codemode\ncodemode.warm()");
    return pyodide;
  }
  const writer = (stream) => ({
    write(bytes) {
      host.writeOutput(stream, bytes);
      return bytes.length;
    },
    isatty: false,
  });
  pyodide.setStdout(writer(1));
  pyodide.setStderr(writer(2));
  pyodide.setStdin({ stdin: () => null });
  pyodide.registerJsModule("_codemode_host", {
    call_tool: (server, tool, argsJson) => host.callTool(server, tool, argsJson),
    catalog_json: () => host.catalogJson(),
    server_tools_json: (server) => host.serverToolsJson(server),
    server_ready: (server) => (host.serverReady ? host.serverReady(server) : Promise.resolve("")),
    wheel_lock: () => host.wheelLock(),
    install_wheel: (fileName, dir) => installWheel(pyodide.FS, host, fileName, dir),
  });
  // A restored snapshot carries the random state it was made with: draw fresh (or seeded) state.
  pyodide.runPython("import codemode\ncodemode.reseed()");
  // Packages the host preloads (none by default), installed and imported before any job.
  pyodide.runPython("import codemode\ncodemode.preload()");
  // For sandboxes booted ahead of demand: the first job would otherwise pay ~10 ms of first-time
  // compilation of the job path's JS and Python.
  if (settings.warmUp) await pyodide.runPythonAsync("import codemode\nawait codemode.warm_up()");
  return pyodide;
}

/**
 * Installs a wheel's files (or its bytecode zip's) into `dir` without reading one: each is a
 * file of the right size whose bytes the host unpacks the first time it is opened (or truncated
 * to a size other than 0). A folder the wheel adds is filled in (its files and folders made) the
 * first time anything looks into it, so the files of subpackages nothing imports are never made
 * (sympy's test suites: 680 of its 1,570 files). Unpacking every file up front cost `import
 * sympy` ~0.7 s, of 2,400 files it reads 500. Returns false if the host has no such file.
 */
export function installWheel(FS, host, fileName, dir) {
  const index = host.wheelIndex(fileName);
  if (!index) return false;
  FS.mkdirTree(dir);
  const root = FS.lookupPath(dir, { follow: true }).node;
  if (root.mount.type !== FS.filesystems.MEMFS) {
    for (let i = 0; i < index.length; i++) {
      const [name, size] = index[i];
      const path = `${dir}/${name}`;
      FS.mkdirTree(path.slice(0, path.lastIndexOf("/")));
      const bytes = new Uint8Array(size);
      unpackWheelMember(FS, [host, fileName, i], bytes);
      FS.writeFile(path, bytes);
    }
    return true;
  }
  // The wheel as a tree: by folder name ("" is `dir`), its files [name, size, i] and folders.
  const tree = new Map();
  const folder = (name) => {
    let entry = tree.get(name);
    if (entry === undefined) {
      tree.set(name, (entry = { files: [], folders: [] }));
      if (name !== "") folder(name.slice(0, Math.max(name.lastIndexOf("/"), 0))).folders.push(name);
    }
    return entry;
  };
  for (let i = 0; i < index.length; i++) {
    const [name, size] = index[i];
    const slash = name.lastIndexOf("/");
    folder(slash < 0 ? "" : name.slice(0, slash)).files.push([name.slice(slash + 1), size, i]);
  }
  lazyTree ??= lazyFiles(FS);
  lazyTree.add(root, { host, fileName, tree }, "");
  return true;
}

let lazyTree = null;

/** Puts the bytes of the file `[host, fileName, i]` names into `dest`, of its size; else EIO. */
function unpackWheelMember(FS, [host, fileName, i], dest) {
  if (!host.wheelMember(fileName, i, dest)) throw new FS.ErrnoError(29); // EIO
}

/**
 * MEMFS's operations for the files and folders installWheel lays out: a file's bytes are read,
 * and a folder filled in, before anything uses them.
 */
function lazyFiles(FS) {
  const { dir, file } = FS.filesystems.MEMFS.ops_table;
  const load = (node) => {
    if (!node.lazy) return;
    const bytes = new Uint8Array(node.usedBytes);
    unpackWheelMember(FS, node.lazy, bytes);
    node.lazy = null;
    node.contents = bytes;
    node.node_ops = file.node;
    node.stream_ops = file.stream;
  };
  const fileNodeOps = {
    ...file.node,
    setattr(node, attr) {
      if (attr.size === 0 && node.lazy) {
        node.lazy = null; // truncated unread (opened for writing): nothing to unpack
        node.contents = new Uint8Array(0);
        node.usedBytes = 0;
      } else if (attr.size !== undefined) {
        load(node);
      }
      return file.node.setattr(node, attr);
    },
  };
  // A stream keeps the operations its node had when opened: these, which load the file before
  // anything but a read uses it.
  const loading =
    (op) =>
    (stream, ...rest) => {
      load(stream.node);
      return op(stream, ...rest);
    };
  const fileStreamOps = {
    ...file.stream,
    write: loading(file.stream.write),
    mmap: loading(file.stream.mmap),
    msync: loading(file.stream.msync),
    // The first read of a whole file (how Python reads a module's bytecode) is unpacked straight
    // into the reader's buffer, wasm memory: no copy of the file is made and kept (`import sympy`
    // made one for each of the 480 files it reads, 15 MB). A file read again, or in parts, is
    // loaded and kept.
    read(stream, buffer, offset, length, position) {
      const node = stream.node;
      if (node.lazy && !node.readOnce && position === 0 && length >= node.usedBytes) {
        const dest = new Uint8Array(buffer.buffer, buffer.byteOffset + offset, node.usedBytes);
        unpackWheelMember(FS, node.lazy, dest);
        node.readOnce = true;
        return node.usedBytes;
      }
      if (node.lazy && position >= node.usedBytes) return 0;
      load(node);
      return file.stream.read(stream, buffer, offset, length, position);
    },
  };

  const path = (parent, name) => `${FS.getPath(parent)}/${name}`;
  // Puts folder `name` of a wheel into `node` now: what is there is replaced, as unzipping over
  // it would (a folder where the wheel has a file fails, as it would there).
  const fill = (node, source, name) => {
    const { files, folders } = source.tree.get(name);
    for (const [base, size, i] of files) {
      if (Object.hasOwn(node.contents, base)) FS.unlink(path(node, base));
      const child = dir.node.mknod(node, base, 0o100644, 0);
      child.lazy = [source.host, source.fileName, i];
      child.usedBytes = size;
      child.contents = null;
      child.node_ops = fileNodeOps;
      child.stream_ops = fileStreamOps;
    }
    for (const sub of folders) {
      const base = sub.slice(sub.lastIndexOf("/") + 1);
      let child = Object.hasOwn(node.contents, base) ? node.contents[base] : null;
      if (child && !FS.isDir(child.mode)) {
        FS.unlink(path(node, base));
        child = null;
      }
      add(child ?? dir.node.mknod(node, base, 0o40755, 0), source, sub);
    }
  };
  // Adds folder `name` of a wheel to `node`: at once if it holds anything already (a lookup of a
  // name it holds never asks the folder, so what is there must be replaced now), else when
  // something first looks into it.
  const add = (node, source, name) => {
    if (node.node_ops === dir.node) node.node_ops = dirOps;
    if (node.pending) {
      node.pending.push([source, name]);
      node.mtime = node.ctime = Date.now();
      return;
    }
    for (const _ in node.contents) return fill(node, source, name);
    node.pending = [[source, name]];
    node.mtime = node.ctime = Date.now(); // changed now, as if filled now (finders compare it)
  };
  const populate = (node) => {
    const pending = node.pending;
    if (!pending) return;
    node.pending = null;
    // As if it had always been there: its times stay.
    const { atime, mtime, ctime } = node;
    for (const [source, name] of pending) fill(node, source, name);
    Object.assign(node, { atime, mtime, ctime });
  };
  const dirOps = {
    ...dir.node,
    lookup(parent, name) {
      if (!parent.pending) return dir.node.lookup(parent, name);
      populate(parent);
      return FS.lookupNode(parent, name);
    },
    readdir(node) {
      populate(node);
      return dir.node.readdir(node);
    },
    mknod(parent, name, mode, dev) {
      populate(parent);
      return dir.node.mknod(parent, name, mode, dev);
    },
    symlink(parent, name, target) {
      populate(parent);
      return dir.node.symlink(parent, name, target);
    },
    unlink(parent, name) {
      populate(parent);
      return dir.node.unlink(parent, name);
    },
    // A folder not yet filled in is not empty.
    rmdir(parent, name) {
      populate(parent);
      populate(FS.lookupNode(parent, name));
      return dir.node.rmdir(parent, name);
    },
    rename(node, newParent, newName) {
      populate(node.parent);
      populate(newParent);
      if (Object.hasOwn(newParent.contents, newName)) populate(newParent.contents[newName]);
      return dir.node.rename(node, newParent, newName);
    },
  };
  return { add };
}

/**
 * Silent warm-up, for a sandbox that others are copied from (a zygote), one step at a time: each
 * step runs the next job of a round (the same path as a real job: runJob, a reseed included, so
 * what a child runs is already compiled) and then freezes what it left. The zygote forks only
 * between steps, so a request waits for one step, not a whole round. `roundDone` says whether the
 * last step ended a round.
 */
export function warmSteps(pyodide) {
  let left = [];
  return {
    roundDone: false,
    async step() {
      if (left.length === 0) left = JSON.parse(pyodide.runPython("import codemode\ncodemode.warm_jobs()"));
      await runJob(pyodide, left.shift());
      pyodide.runPython("import codemode\ncodemode.warm_done()");
      this.roundDone = left.length === 0;
    },
  };
}

/**
 * Runs one job ({code, filename, files?, outputs?}): `codemode.run_job`'s coroutine, awaited from
 * here, runs as a task of Pyodide's event loop (as runPythonAsync's code would), so tool calls can
 * use JSPI's run_sync. Returns the outcome JSON produced by codemode.run_job: {result, error,
 * exit_code}.
 */
export async function runJob(pyodide, job) {
  const codemode = codemodeOf(pyodide);
  // A sandbox copied from one already booted (a forked child) draws fresh `random` state first.
  if (job.reseed) codemode.reseed();
  return await startJob(codemode, job);
}

/**
 * Starts `codemode.run_job` on the job's JSON. In a function of its own, so that no register of
 * runJob's suspended frame keeps the JSON: the job's files (base64) are held once, by Python,
 * until they are written out.
 */
function startJob(codemode, job) {
  const json = JSON.stringify(job);
  delete job.files;
  return codemode.runJob(json);
}

/**
 * The prelude's entry points, looked up once per instance: a job calls them directly rather than
 * through `runPython`, which parsed, copied and compiled its source for every job (~1.5 ms of a
 * forked child's first job, most of it first-time work there).
 */
const entryPoints = new WeakMap();
function codemodeOf(pyodide) {
  let found = entryPoints.get(pyodide);
  if (!found) {
    const codemode = pyodide.pyimport("codemode");
    // Borrowed from the module's proxy, which is therefore kept (never destroyed).
    found = { reseed: codemode.reseed, runJob: codemode.run_job };
    entryPoints.set(pyodide, found);
  }
  return found;
}
