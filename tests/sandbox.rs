//! Attacks on the sandbox, kept as regression tests: each fails if its route reopens.
//!
//! Most start from the real global object, which a script can always reach (a missed global
//! lookup in Emscripten's JS falls through to `Object.prototype`, where a Python-defined accessor
//! receives `this` = globalThis). What must hold is that nothing reachable from there is harmful.

use crate::util::{execute, execute_with, limits, BIN};
use futures::future::BoxFuture;
use mcp_code_mode::bridge::memory::MemoryBudget;
use mcp_code_mode::bridge::{
    codemode_bridge, Lifecycle, Memory, ServerCatalog, ToolCallError, ToolHost, ToolSpec,
    KEPT_DENO_CORE_OPS,
};
use mcp_code_mode::engine::{Limits, Outcome};
use serde_json::{json, Map, Value};
use std::io::{BufRead, BufReader, Write};
use std::process::Stdio;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Python that leaves the isolate's real `globalThis` in `g` (and `obj(**kw)`: a JS object).
pub const REAL_GLOBAL: &str = r#"
import js, pyodide_js
from pyodide.ffi import create_proxy, to_js
_box = []; _d = js.Object.new(); _d.configurable = True
_d.get = create_proxy(lambda this: _box.append(this), capture_this=True)
js.Object.defineProperty(js.Object.prototype, "devicePixelRatio", _d)
pyodide_js._module._emscripten_get_device_pixel_ratio()
js.Reflect.deleteProperty(js.Object.prototype, "devicePixelRatio")
g = _box[0]
assert g.readbuffer is not None, "the escape must reach the real global for these tests to mean anything"
def obj(**kw): return to_js(kw, dict_converter=js.Object.fromEntries)
"#;

async fn attack(code: &str, memory_mb: u64) -> Outcome {
    let config = crate::util::config(Limits {
        memory_mb,
        ..limits(60.0)
    });
    execute_with(config, &format!("{REAL_GLOBAL}\n{code}")).await
}

fn error_text(o: &Outcome) -> String {
    o.error
        .as_ref()
        .map(|e| format!("{}: {}", e.kind, e.message))
        .unwrap_or_else(|| format!("no error; result {}", o.result))
}

// ---- no route to deno_core's ops ------------------------------------------------------------

#[tokio::test]
async fn the_real_global_holds_no_ops() {
    let o = attack(
        "[hasattr(g, n) for n in ('Deno', '__bootstrap', 'Intl', 'Temporal')]",
        512,
    )
    .await;
    assert_eq!(o.error, None, "{}", error_text(&o));
    assert_eq!(o.result, json!([false, false, false, false]));
}

/// Even JS holding `Deno.core.ops` (the sandbox's own modules, before they delete it) reaches
/// only our ops and the few deno_core built-ins the event loop needs.
#[test]
fn every_other_deno_core_op_is_disabled() {
    mcp_code_mode::engine::init_v8();
    // V8 posts delayed tasks (freeing a GC's pages) through the tokio runtime it runs in.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let _entered = rt.enter();
    let mut js = deno_core::JsRuntime::new(deno_core::RuntimeOptions {
        extensions: vec![codemode_bridge::init()],
        ..Default::default()
    });
    let kept: Vec<&str> = codemode_bridge::init()
        .ops
        .iter()
        .map(|op| op.name)
        .chain(KEPT_DENO_CORE_OPS.iter().copied())
        .collect();
    let probe = format!(
        r#"
        const kept = new Set({kept});
        const open = [];
        let disabled = 0;
        for (const name of Object.keys(Deno.core.ops)) {{
          if (kept.has(name)) continue;
          const refused = (e) => {{
            if (String(e && e.message) === "op is disabled") disabled++;
            else open.push(name + ": " + (e && e.message));
          }};
          try {{
            const r = Deno.core.ops[name]("x", "y");
            // Async ops reject their promise instead of throwing.
            if (r instanceof Promise) r.then(() => open.push(name), refused);
            else open.push(name);
          }} catch (e) {{ refused(e); }}
        }}
        globalThis.probed = {{ open, get disabled() {{ return disabled; }} }};
        "#,
        kept = serde_json::to_string(&kept).unwrap()
    );
    js.execute_script("probe.js", probe)
        .unwrap_or_else(|e| panic!("{e}"));
    rt.block_on(js.run_event_loop(Default::default()))
        .unwrap_or_else(|e| panic!("{e}"));
    js.execute_script(
        "check.js",
        r#"
        if (probed.open.length) throw new Error("ops still open: " + probed.open.join(", "));
        if (probed.disabled < 80) throw new Error("only " + probed.disabled + " ops were probed");
        "#,
    )
    .unwrap_or_else(|e| panic!("{e}"));
}

/// The outcome comes only from the runner (it holds the token the job came with); boot-only ops
/// refuse once the sandbox is ready.
#[test]
fn the_outcome_cannot_be_forged_and_boot_ops_close() {
    mcp_code_mode::engine::init_v8();
    // V8 posts delayed tasks (freeing a GC's pages) through the tokio runtime it runs in.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let _entered = rt.enter();
    let mut js = deno_core::JsRuntime::new(deno_core::RuntimeOptions {
        extensions: vec![codemode_bridge::init()],
        ..Default::default()
    });
    let (ready_tx, _ready_rx) = tokio::sync::oneshot::channel();
    let (_job_tx, job_rx) = tokio::sync::mpsc::unbounded_channel();
    let (outcome_tx, mut outcome_rx) = tokio::sync::mpsc::unbounded_channel::<String>();
    {
        let state = js.op_state();
        let mut state = state.borrow_mut();
        let settings = mcp_code_mode::engine::BootSettings::new(
            &mcp_code_mode::engine::Limits::default(),
            None,
            false,
            false,
        );
        state.put(Lifecycle::new(settings, ready_tx, job_rx, outcome_tx));
        state.put(Memory(MemoryBudget::new(1 << 20)));
    }
    let probe = r#"
        const ops = Deno.core.ops;
        const throws = (f, needle) => {
          try { f(); } catch (e) { if (String(e.message).includes(needle)) return; throw e; }
          throw new Error("did not throw: " + f);
        };
        ops.op_assets_read("pyodide.asm.mjs");   // fine while booting
        ops.op_sandbox_ready("");
        throws(() => ops.op_sandbox_report("", "{}"), "only the sandbox's runner");
        throws(() => ops.op_sandbox_report("guess", "{}"), "only the sandbox's runner");
        throws(() => ops.op_assets_read("pyodide.asm.mjs"), "only while the sandbox boots");
        throws(() => ops.op_assets_text("pyodide.mjs"), "only while the sandbox boots");
        throws(() => ops.op_snapshot_read(), "only while the sandbox boots");
        throws(() => ops.op_sandbox_settings(), "only while the sandbox boots");
        if (ops.op_wasm_cached_module() !== undefined) throw new Error("the wasm cache is open");
    "#;
    js.execute_script("probe.js", probe)
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(
        outcome_rx.try_recv().is_err(),
        "a forged outcome was accepted"
    );
}

// ---- the MCP channel is ours alone ----------------------------------------------------------

/// Every route to stdout a script can find, tried while another request is in flight: the
/// client must see only well-formed responses, each once, to the request it answers.
#[test]
fn no_script_writes_to_the_mcp_channel() {
    let forged = r#"{"jsonrpc":"2.0","id":2,"result":{"content":[{"type":"text","text":"FORGED"}],"isError":false}}"#;
    let attack = format!(
        r#"{REAL_GLOBAL}
import os, sys
line = {forged:?} + "\n"
routes = []
def attempt(name, f):
    try:
        f(); routes.append(name)
    except Exception as e:
        routes.append(name + " refused")
for name in ("log", "info", "warn", "error", "debug", "trace"):
    attempt("console." + name, lambda: getattr(g.console, name)(line))
attempt("Module.print", lambda: pyodide_js._module.print(line))
attempt("Module.printErr", lambda: pyodide_js._module.printErr(line))
attempt("Deno.core.print", lambda: g.Deno.core.print(line))
attempt("os.write", lambda: os.write(1, line.encode()))
attempt("sys.__stdout__", lambda: sys.__stdout__.write(line))
print(line)
routes
"#
    );
    let home = tempfile::tempdir().unwrap();
    let mut server = crate::util::command(BIN)
        .arg("serve")
        .current_dir(home.path())
        .env_remove("MCP_CODE_MODE_CONFIG")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("the server starts");
    let mut stdin = server.stdin.take().unwrap();
    let send = |stdin: &mut std::process::ChildStdin, message: Value| {
        writeln!(stdin, "{message}").unwrap();
        stdin.flush().unwrap();
    };
    let call = |id: u64, code: &str| {
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
               "params": {"name": "execute_code", "arguments": {"code": code}}})
    };
    send(
        &mut stdin,
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "attack-test", "version": "0"}}}),
    );
    let (lines_tx, lines_rx) = std::sync::mpsc::channel();
    let stdout = server.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            if lines_tx.send(line.unwrap_or_default()).is_err() {
                break;
            }
        }
    });
    let mut responses: Vec<Value> = Vec::new();
    let mut sent_calls = false;
    while responses
        .iter()
        .filter(|r| r["id"] == 2 || r["id"] == 3)
        .count()
        < 2
    {
        let line = lines_rx
            .recv_timeout(Duration::from_secs(120))
            .expect("the server answers both calls");
        let message: Value = serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("not a JSON-RPC message on stdout ({e}): {line:?}"));
        assert_eq!(message["jsonrpc"], "2.0", "{line}");
        if message.get("method").is_some() {
            continue; // a notification
        }
        assert!(
            [1, 2, 3].contains(&message["id"].as_u64().unwrap_or(0)),
            "{line}"
        );
        if message["id"] == 1 && !sent_calls {
            send(
                &mut stdin,
                json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
            );
            send(
                &mut stdin,
                call(2, "import asyncio\nawait asyncio.sleep(2)\n'slow-done'"),
            );
            send(&mut stdin, call(3, &attack));
            sent_calls = true;
        }
        responses.push(message);
    }
    let _ = server.kill();
    let _ = server.wait();
    let answers = |id: u64| responses.iter().filter(|r| r["id"] == id).count();
    assert_eq!((answers(1), answers(2), answers(3)), (1, 1, 1));
    let slow = responses.iter().find(|r| r["id"] == 2).unwrap().to_string();
    assert!(
        slow.contains("slow-done") && !slow.contains("FORGED"),
        "{slow}"
    );
    let attacked = responses.iter().find(|r| r["id"] == 3).unwrap().to_string();
    assert!(
        attacked.contains("console.log") && attacked.contains("Deno.core.print refused"),
        "the attack ran its routes: {attacked}"
    );
}

// ---- one memory budget, by every route -------------------------------------------------------

#[tokio::test]
async fn one_huge_string_stops_the_script_not_the_process() {
    let o = attack("js.Array.new(2**29 - 100).join('\\u0101')", 256).await;
    assert_eq!(o.error.map(|e| e.kind).as_deref(), Some("MemoryError"));
    assert_eq!(execute("2 + 2").await.result, json!(4));
}

/// Routes that allocate outside the JS heap, each refused within the budget.
#[tokio::test]
async fn memory_outside_the_js_heap_is_counted() {
    let refused = [
        ("an ArrayBuffer", "js.ArrayBuffer.new(2**31)"),
        (
            "typed arrays kept",
            "keep = [js.Uint8Array.new(16 * 2**20) for _ in range(64)]",
        ),
        (
            "growMemory, then Python",
            "pyodide_js._module.growMemory(2**30)\nx = bytearray(2**30)",
        ),
        (
            "_emscripten_resize_heap, then Python",
            "pyodide_js._module._emscripten_resize_heap(2**30)\nx = bytearray(2**30)",
        ),
        (
            "Memory.prototype.grow",
            "g.WebAssembly.Memory.prototype.grow.call(g.WebAssembly.Memory.new(obj(initial=1)), 16384)",
        ),
        (
            "new WebAssembly.Memory",
            "keep = [g.WebAssembly.Memory.new(obj(initial=1024)) for _ in range(64)]",
        ),
        (
            "a subclass of WebAssembly.Memory",
            "M = js.Object.getPrototypeOf(g.WebAssembly.Memory.new(obj(initial=1))).constructor\nkeep = [js.Reflect.construct(M, [obj(initial=1024)]) for _ in range(64)]",
        ),
        (
            "new WebAssembly.Table",
            "keep = [g.WebAssembly.Table.new(obj(initial=10000000, element='anyfunc')) for _ in range(8)]",
        ),
        (
            "a resizable ArrayBuffer",
            "js.ArrayBuffer.new(0, obj(maxByteLength=2**32))",
        ),
        (
            "a growable SharedArrayBuffer",
            "g.SharedArrayBuffer.new(0, obj(maxByteLength=2**32))",
        ),
        (
            "a module of the script's own",
            "g.WebAssembly.Module.new(js.Uint8Array.new([0, 97, 115, 109, 1, 0, 0, 0]))",
        ),
        (
            "a module of the script's own, async",
            "await g.WebAssembly.compile(js.Uint8Array.new([0, 97, 115, 109, 1, 0, 0, 0]))",
        ),
        (
            "wasm memory as a resizable buffer",
            "g.WebAssembly.Memory.new(obj(initial=1)).toResizableBuffer()",
        ),
        (
            "TextEncoder copies kept",
            "enc = g.TextEncoder.new()\nheld = js.Array.new()\nheld.push('x' * (8 * 2**20))\nkeep = [js.Reflect.apply(enc.encode, enc, held) for _ in range(64)]",
        ),
        (
            "wasm memories with Number patched",
            "g.Number = create_proxy(lambda *a: 0)\nkeep = [g.WebAssembly.Memory.new(obj(initial=1024)) for _ in range(64)]",
        ),
        (
            "many Python objects",
            "keep = []\nwhile True: keep.append(bytearray(2**20))",
        ),
    ];
    for (route, code) in refused {
        let o = attack(code, 256).await;
        let text = error_text(&o);
        assert!(
            o.error.is_some()
                && [
                    "MemoryError",
                    "out of memory",
                    "disallowed by embedder",
                    "AttributeError: toResizableBuffer"
                ]
                .iter()
                .any(|why| text.contains(why)),
            "{route}: not refused for memory: {text}"
        );
    }
    assert_eq!(execute("2 + 2").await.result, json!(4));
}

/// Peak RSS of one `mcp-code-mode run` (a fresh process, measured by the kernel).
fn peak_rss_mib(code: &str, memory_mb: u64) -> f64 {
    let measure = r#"
import resource, subprocess, sys
subprocess.run(sys.argv[1:], input=sys.stdin.buffer.read(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024)
"#;
    let mut child = crate::util::command("python3")
        .args([
            "-c",
            measure,
            BIN,
            "run",
            "--memory-mb",
            &memory_mb.to_string(),
            "-",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3 runs");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(code.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .expect("a number")
}

#[test]
fn peak_memory_stays_within_the_budget() {
    let budget = 256;
    let baseline = peak_rss_mib("print(1)", budget);
    for code in [
        "import js\nkeep = []\nwhile True: keep.append(js.Uint8Array.new(16 * 2**20).fill(1))",
        "keep = []\nwhile True: keep.append(bytearray(16 * 2**20))",
        "import js\nkeep = []\nwhile True: keep.append(js.Array.new(2**20).fill(1.5))",
        "import js\njs.Array.new(2**29 - 100).join('\\u0101')",
        &format!("{REAL_GLOBAL}\nkeep = [g.WebAssembly.Memory.new(obj(initial=1024)) for _ in range(64)]\nfor m in keep: js.Uint8Array.new(m.buffer).fill(1)"),
    ] {
        let peak = peak_rss_mib(code, budget);
        assert!(
            peak - baseline <= budget as f64,
            "peak {peak:.0} MiB is more than {budget} MiB over the {baseline:.0} MiB of print(1):\n{code}"
        );
    }
}

// ---- caps that hold under concurrency --------------------------------------------------------

struct CountingHost(Arc<AtomicUsize>);

impl ToolHost for CountingHost {
    fn catalog(&self) -> Vec<ServerCatalog> {
        vec![ServerCatalog {
            server: "test".into(),
            description: String::new(),
            tools: vec![ToolSpec {
                name: "echo".into(),
                python_name: String::new(),
                description: String::new(),
                input_schema: json!({"type": "object"}),
                output_schema: None,
                annotations: None,
            }]
            .into(),
        }]
    }
    fn call(
        &self,
        _: &str,
        _: &str,
        args: Map<String, Value>,
    ) -> BoxFuture<'static, Result<Value, ToolCallError>> {
        self.0.fetch_add(1, Ordering::SeqCst);
        Box::pin(async move {
            tokio::time::sleep(Duration::from_millis(200)).await;
            Ok(Value::Object(args))
        })
    }
}

async fn with_counted_tools(code: &str) -> (Outcome, usize) {
    let calls = Arc::new(AtomicUsize::new(0));
    let mut config = crate::util::config(limits(60.0));
    config.tools = Arc::new(CountingHost(calls.clone()));
    let o = execute_with(config, code).await;
    (o, calls.load(Ordering::SeqCst))
}

#[tokio::test]
async fn the_tool_call_cap_holds_for_calls_in_flight() {
    let (o, reached) = with_counted_tools(
        "import asyncio\n\
r = await asyncio.gather(*(tools.test.echo.aio(i=i) for i in range(1500)), return_exceptions=True)\n\
failed = next(x for x in r if isinstance(x, Exception))\n\
[sum(1 for x in r if not isinstance(x, Exception)), str(failed), failed.kind]",
    )
    .await;
    assert_eq!(o.error, None, "{}", error_text(&o));
    assert_eq!(reached, 1000, "calls that reached the host");
    assert_eq!(o.result[0], json!(1000));
    assert_eq!(o.result[2], "limit");
    assert!(
        o.result[1]
            .as_str()
            .unwrap()
            .contains("the most one execution may make"),
        "{}",
        o.result
    );
}

#[tokio::test]
async fn huge_tool_arguments_are_refused_before_parsing() {
    let (o, reached) = with_counted_tools(
        "try:\n    tools.test.echo(blob='x' * (20 * 2**20))\nexcept ToolError as e:\n    err = [e.message, e.kind]\nerr",
    )
    .await;
    assert_eq!(o.error, None, "{}", error_text(&o));
    assert_eq!(reached, 0);
    assert_eq!(o.result[1], "invalid");
    assert!(
        o.result[0]
            .as_str()
            .unwrap()
            .contains("more than the 8 MiB"),
        "{}",
        o.result
    );
}

/// The tool ops take a script's strings as counted bytes and check their size before copying
/// them; waiting for a server takes a call slot like a call does.
#[tokio::test]
async fn tool_op_arguments_are_checked_before_they_are_copied() {
    let (o, reached) = with_counted_tools(
        "import _codemode_host as host, json\n\
from pyodide.ffi import run_sync\n\
big = 's' * (16 * 2**20)\n\
call = json.loads(run_sync(host.call_tool(big, 'echo', '{}')))\n\
tool = json.loads(run_sync(host.call_tool('test', big, '{}')))\n\
listed = host.server_tools_json(big)\n\
waits = [run_sync(host.server_ready('test')) for _ in range(1000)]\n\
try:\n    tools.test.echo()\n    after = 'called'\nexcept ToolError as e:\n    after = e.message\n\
[call['error'], tool['error'], listed, sorted(set(waits)), run_sync(host.server_ready(big)), after]",
    )
    .await;
    assert_eq!(o.error, None, "{}", error_text(&o));
    assert_eq!(reached, 0);
    let r = &o.result;
    let too_long = |what: &str| {
        format!("a {what} name of 16777216 bytes is longer than any served (4096 at most)")
    };
    assert_eq!(r[0], json!(too_long("server")), "{r}");
    assert_eq!(r[1], json!(too_long("tool")), "{r}");
    assert_eq!(r[2], json!(""), "{r}");
    assert_eq!(r[3], json!([""]), "1000 waits for a running server: {r}");
    assert!(
        r[4].as_str()
            .unwrap()
            .contains("already started 1000 tool calls"),
        "{r}"
    );
    assert!(
        r[5].as_str()
            .unwrap()
            .contains("already started 1000 tool calls"),
        "{r}"
    );
}

/// `TextEncoder.encodeInto` writes only whole UTF-8 sequences and counts the UTF-16 code units
/// it read, as the Encoding standard (and every browser) does. (Scripts see it only through the
/// real global: it is not among the standard globals `js` offers.)
#[tokio::test]
async fn text_encoder_encode_into_writes_whole_characters() {
    let o = attack(
        "out = []\nfor n in [0, 1, 2, 3, 5, 6, 9, 10, 12]:\n\
         \x20   r = g.TextEncoder.new().encodeInto('a\u{e9}\u{20ac}\u{1f600}', js.Uint8Array.new(n))\n\
         \x20   out.append([n, r.read, r.written])\nout",
        256,
    )
    .await;
    assert_eq!(o.error, None, "{o:?}");
    assert_eq!(
        o.result,
        json!([
            [0, 0, 0],
            [1, 1, 1],
            [2, 1, 1],
            [3, 2, 3],
            [5, 2, 3],
            [6, 3, 6],
            [9, 3, 6],
            [10, 5, 10],
            [12, 5, 10]
        ])
    );
}
