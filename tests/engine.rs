//! The sandbox engine through its library API: outcomes, limits, isolation, seeds, the tool bridge.

use crate::util::{execute, execute_with, limits};
use futures::future::BoxFuture;
use mcp_code_mode::bridge::{ServerCatalog, ToolCallError, ToolHost, ToolSpec};
use mcp_code_mode::engine::{Job, Limits, Sandbox};
use serde_json::{json, Map, Value};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[tokio::test]
async fn last_expression_is_the_result_and_prints_are_kept() {
    let o =
        execute("import sys\nprint('out')\nprint('err', file=sys.stderr)\n{'a': [1, 2.5, None]}")
            .await;
    assert_eq!(o.error, None);
    assert_eq!(o.stdout, "out\n");
    assert_eq!(o.stderr, "err\n");
    assert_eq!(o.result, json!({"a": [1, 2.5, null]}));
}

/// Pyodide's standard library is a zip of sources: a module the snapshot does not hold is
/// compiled once when imported (zipimport alone compiled it twice, once only to name its file),
/// and its spec and `__file__` still name the file in the zip.
/// A zygote tiers up the JS its warm-up jobs run, once, for every child; a field that a server's
/// job carries and theirs lack is a path each child would tier up for itself (output limits:
/// a job with them walks /output for files to return; measured, ~12 % of a `print(1)`
/// execution's CPU went to such compiling and deoptimizing).
#[tokio::test]
async fn warm_up_jobs_carry_what_a_servers_job_carries() {
    let out = execute(
        "import codemode, json\nprint(json.dumps([sorted(j) for j in json.loads(codemode.warm_jobs())]))",
    )
    .await;
    assert_eq!(out.error, None, "{}", out.stderr);
    let warm: Vec<Vec<String>> = serde_json::from_str(out.stdout.trim()).unwrap();
    let job = serde_json::to_value(Job::new("x")).unwrap();
    let mut fields: Vec<String> = job.as_object().unwrap().keys().cloned().collect();
    fields.push("reseed".into());
    fields.sort();
    assert!(!warm.is_empty());
    for keys in warm {
        assert_eq!(keys, fields);
    }
}

/// A zygote's warm-up calls its warm-up tools (`codemode.WARM_TOOLS`), so that the path of a
/// tool call is optimized once, in the zygote, not in each child. A warm-up job's failure is
/// silent (one fails on purpose): a call that no longer went through (a renamed tool, another
/// signature) would leave that path to every child again, and only this would say so.
#[tokio::test]
async fn the_warm_up_calls_tools_and_each_call_answers() {
    let source = execute(
        "import codemode, json\n\
         [codemode.WARM_TOOLS, [j['code'] for j in json.loads(codemode.warm_jobs())].count(codemode.WARM_TOOLS)]",
    )
    .await;
    assert_eq!(source.error, None, "{}", source.stderr);
    assert_eq!(source.result[1], json!(1), "one warm-up job calls tools");
    let code = source.result[0].as_str().expect("the job's code");
    let mut config = crate::util::config(Limits::default());
    config.tools = Arc::new(mcp_code_mode::engine::zygote::WarmUpTools);
    let o = execute_with(config, code).await;
    assert_eq!(o.error, None, "{}", o.stderr);
    let answered = |tool: &str, ok: bool| {
        o.tool_calls
            .iter()
            .filter(|c| c.server == "warm_up" && c.tool == tool && c.ok == ok)
            .count()
    };
    assert_eq!((answered("add", true), answered("fail", false)), (101, 1));
    assert_eq!(o.tool_calls.len(), 102);
    // 100 plain calls (i + 2 for i < 100), one awaited (1 + 2), and the failure's kind, "tool".
    assert_eq!(o.result, json!(4950.0 + 200.0 + 3.0 + 4.0));
}

#[tokio::test]
async fn a_standard_library_module_is_compiled_once_when_imported() {
    let o = execute(
        "import builtins, sys\n\
         assert 'argparse' not in sys.modules\n\
         compiled, real = [], builtins.compile\n\
         def counting(source, filename, *args, **kwargs):\n\
         \x20   compiled.append(filename)\n\
         \x20   return real(source, filename, *args, **kwargs)\n\
         builtins.compile = counting\n\
         try:\n\
         \x20   import argparse\n\
         finally:\n\
         \x20   builtins.compile = real\n\
         ([f for f in compiled if f.endswith('argparse.py')], argparse.__spec__.origin, argparse.__file__)",
    )
    .await;
    assert_eq!(o.error, None, "{}", o.stderr);
    let file = "/lib/python314.zip/argparse.py";
    assert_eq!(o.result, json!([[file], file, file]));
}

#[tokio::test]
async fn a_result_that_is_not_json_comes_back_as_its_repr() {
    let o = execute("class P:\n    def __repr__(self): return 'P()'\n(P(), {1, 2} - {2})").await;
    assert_eq!(o.result, json!("(P(), {1})"));
}

#[tokio::test]
async fn errors_carry_type_message_and_the_scripts_own_line_numbers() {
    let o = execute("x = 1\n\ndef f(d):\n    return d['missing']\n\nf({})\n").await;
    let e = o.error.expect("an error");
    assert_eq!(e.kind, "KeyError");
    assert_eq!(e.message, "'missing'");
    assert!(
        e.traceback
            .contains("File \"<script>\", line 6, in <module>"),
        "{}",
        e.traceback
    );
    assert!(
        e.traceback
            .contains("File \"<script>\", line 4, in f\n    return d['missing']"),
        "{}",
        e.traceback
    );
    assert!(
        !e.traceback.contains("_pyodide"),
        "Pyodide's own frames must be hidden: {}",
        e.traceback
    );
    assert_eq!(o.exit_code, 1);
}

#[tokio::test]
async fn syntax_errors_point_at_the_line() {
    let e = execute("a = 1\nb = (\n").await.error.expect("an error");
    assert_eq!(e.kind, "SyntaxError");
    assert!(e.traceback.contains("line 2"), "{}", e.traceback);
}

/// What a script returns follows Pyodide's `eval_code_async` (codemode runs scripts its own, leaner
/// way): the last statement's value when it is an expression, nothing when a semicolon ends the
/// script, comments aside; scripts are dedented; a last expression may await.
#[tokio::test]
async fn the_result_follows_pyodides_rules() {
    for (code, result) in [
        ("x = 20\nx + 1;", json!(null)),
        ("x = 20\nx + 1  # the answer; or not", json!(21)),
        ("x = 20\nx + 2; # quiet", json!(null)),
        ("    x = 20\n    x + 3", json!(23)),
        (
            "import asyncio\nasync def f():\n    return 24\nawait f()",
            json!(24),
        ),
        ("for i in range(3):\n    i", json!(null)),
        ("print('a;b')\n'c;d'", json!("c;d")),
    ] {
        let o = execute(code).await;
        assert_eq!((o.error, o.result), (None, result), "{code:?}");
    }
    let e = execute("x = 0\n\n1 / x").await.error.expect("an error");
    assert_eq!(e.kind, "ZeroDivisionError");
    assert!(e.traceback.contains("line 3"), "{}", e.traceback);
}

#[tokio::test]
async fn top_level_await_works() {
    let o = execute("import asyncio\nawait asyncio.sleep(0.01)\nawait asyncio.gather(*(asyncio.sleep(0, i) for i in range(3)))").await;
    assert_eq!(o.error, None);
    assert_eq!(o.result, json!([0, 1, 2]));
}

// ---- limits ---------------------------------------------------------------------------------

async fn assert_stopped_in_time(
    code: &str,
    timeout_s: f64,
    kind: &str,
) -> mcp_code_mode::engine::Outcome {
    let started = Instant::now();
    let o = execute_with(crate::util::config(limits(timeout_s)), code).await;
    let took = started.elapsed().as_secs_f64();
    let e = o
        .error
        .clone()
        .unwrap_or_else(|| panic!("{code:?} should fail, got {o:?}"));
    assert_eq!(e.kind, kind, "{e:?}");
    assert!(
        o.duration_ms <= (timeout_s + 0.5) * 1000.0,
        "took {} ms",
        o.duration_ms
    );
    // Boot is outside the limit; the whole call must still not hang.
    assert!(took < timeout_s + 20.0, "took {took} s in all");
    o
}

#[tokio::test]
async fn a_busy_loop_is_stopped_by_the_timeout_and_keeps_earlier_output() {
    let o = assert_stopped_in_time("print('started')\nwhile True: pass", 1.0, "TimeoutError").await;
    assert_eq!(o.stdout, "started\n");
    assert!(o.error.unwrap().message.contains("1 s limit"));
}

#[tokio::test]
async fn an_asyncio_busy_loop_is_stopped_by_the_timeout() {
    let code = "import asyncio\nasync def spin():\n    while True:\n        await asyncio.sleep(0)\nawait spin()";
    assert_stopped_in_time(code, 1.0, "TimeoutError").await;
}

#[tokio::test]
async fn a_sleeping_script_is_stopped_by_the_timeout() {
    assert_stopped_in_time(
        "import asyncio\nawait asyncio.sleep(3600)",
        1.0,
        "TimeoutError",
    )
    .await;
}

#[tokio::test]
async fn deep_recursion_is_a_recursion_error() {
    assert_stopped_in_time("def f(n): return f(n + 1)\nf(0)", 10.0, "RecursionError").await;
}

#[tokio::test]
async fn a_memory_bomb_is_a_memory_error_under_the_cap() {
    let o = assert_stopped_in_time(
        "blocks = []\nwhile True: blocks.append(bytearray(10**7))",
        20.0,
        "MemoryError",
    )
    .await;
    assert!(o.duration_ms < 20_000.0);
    // One large allocation past the cap as well.
    let small = Limits {
        memory_mb: 128,
        ..Limits::default()
    };
    let o = execute_with(crate::util::config(small), "x = bytearray(200 * 2**20)").await;
    assert_eq!(o.error.map(|e| e.kind).as_deref(), Some("MemoryError"));
}

#[tokio::test]
async fn exhausting_the_javascript_heap_is_a_memory_error_not_a_crash() {
    let code = "from js import Array\nkeep = []\nwhile True:\n    keep.append(Array.new(1000000).fill(1.5))";
    let config = crate::util::config(Limits {
        memory_mb: 128,
        ..limits(60.0)
    });
    let o = execute_with(config, code).await;
    let e = o.error.expect("an error");
    assert_eq!(e.kind, "MemoryError");
    assert!(
        e.message.contains("JavaScript heap (32 MiB of its 128 MiB"),
        "{}",
        e.message
    );
    assert_eq!(
        execute("2 + 2").await.result,
        json!(4),
        "the process is still healthy"
    );
}

#[tokio::test]
async fn a_print_flood_is_truncated_with_a_notice_saying_how_much_was_dropped() {
    let config = crate::util::config(Limits {
        max_output: 1000,
        ..limits(1.0)
    });
    let o = execute_with(config, "while True: print('x' * 99)").await;
    assert_eq!(o.error.map(|e| e.kind).as_deref(), Some("TimeoutError"));
    let (kept, notice) = o.stdout.split_at(1000);
    assert!(kept.chars().all(|c| c == 'x' || c == '\n'));
    assert!(
        notice.starts_with("\n[mcp-code-mode: stdout truncated: "),
        "{notice}"
    );
    assert!(
        notice.contains("more bytes were dropped after the first 1000"),
        "{notice}"
    );

    let config = crate::util::config(Limits {
        max_output: 10,
        ..Limits::default()
    });
    let o = execute_with(config, "print('a' * 25)").await;
    assert_eq!(o.stdout, "aaaaaaaaaa\n[mcp-code-mode: stdout truncated: 16 more bytes were dropped after the first 10 (--max-output)]\n");
}

#[tokio::test]
async fn the_process_stays_healthy_after_a_killed_sandbox() {
    let o = execute_with(crate::util::config(limits(0.5)), "while True: pass").await;
    assert_eq!(o.error.unwrap().kind, "TimeoutError");
    let o = execute("sum(range(10))").await;
    assert_eq!(o.result, json!(45));
}

#[tokio::test]
async fn a_job_timeout_overrides_the_limit() {
    let sandbox = Sandbox::new(crate::util::config(Limits::default()))
        .await
        .unwrap();
    let job = Job {
        timeout: Some(Duration::from_millis(300)),
        ..Job::new("while True: pass")
    };
    let o = sandbox.execute(job).await;
    assert_eq!(o.error.unwrap().kind, "TimeoutError");
    assert!(o.duration_ms < 800.0, "{}", o.duration_ms);
}

/// The host's `RunControl`: time paused does not count against the timeout (a script that runs
/// 1.5 s past a 1 s timeout while its clock was held 1 s finishes); a stop ends the job at once
/// with the host's error, keeping what it printed.
#[tokio::test]
async fn a_paused_clock_extends_the_timeout_and_a_stop_ends_the_job() {
    use mcp_code_mode::engine::RunControl;
    let sleeper = || Job {
        timeout: Some(Duration::from_secs(1)),
        ..Job::new("import time\ntime.sleep(1.5)\n'done'")
    };
    let boot = || async {
        Sandbox::new(crate::util::config(Limits::default()))
            .await
            .unwrap()
    };
    let sandbox = boot().await;
    let control = RunControl::new();
    let held = control.pause();
    let release = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(1000)).await;
        drop(held);
    });
    let o = sandbox.execute_with(sleeper(), control).await;
    release.await.unwrap();
    assert_eq!((o.error, o.result), (None, json!("done")));
    // Unpaused, the same script times out.
    let o = boot()
        .await
        .execute_with(sleeper(), RunControl::new())
        .await;
    assert_eq!(o.error.unwrap().kind, "TimeoutError");

    // Booted first, so the stop comes while the script runs.
    let sandbox = Sandbox::new(crate::util::config(Limits::default()))
        .await
        .unwrap();
    let control = RunControl::new();
    let stopper = control.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(400)).await;
        stopper.stop("ApprovalCancelled", "stopped by its host");
    });
    let job = Job {
        timeout: Some(Duration::from_secs(5)),
        ..Job::new("print('before', flush=True)\nimport time\ntime.sleep(3)\nprint('after')")
    };
    let o = sandbox.execute_with(job, control).await;
    let error = o.error.unwrap();
    assert_eq!(
        (error.kind.as_str(), error.message.as_str()),
        ("ApprovalCancelled", "stopped by its host")
    );
    assert_eq!(o.stdout, "before\n");
    assert!(o.duration_ms < 2000.0, "{}", o.duration_ms);
}

// ---- isolation ------------------------------------------------------------------------------

async fn assert_fails(code: &str, needle: &str) {
    let o = execute(code).await;
    let e = o
        .error
        .unwrap_or_else(|| panic!("{code:?} should fail, got result {:?}", o.result));
    let text = format!("{}: {}", e.kind, e.message);
    assert!(
        text.contains(needle),
        "{code:?}: expected {needle:?} in {text:?}"
    );
}

#[tokio::test]
async fn host_files_are_not_readable() {
    assert_fails("open('/etc/hostname').read()", "FileNotFoundError").await;
    assert_fails(
        "import js\njs.readbuffer('/etc/hostname')",
        "AttributeError",
    )
    .await;
    assert_fails(
        "import pyodide_js\nawait pyodide_js._api.loadBinaryFile('/etc/hostname')",
        "op_assets_read works only while the sandbox boots",
    )
    .await;
    // Even the pinned name must not become a path into the host's filesystem.
    assert_fails(
        "import pyodide_js\nawait pyodide_js._api.loadBinaryFile('/pyodide/../etc/passwd')",
        "op_assets_read works only while the sandbox boots",
    )
    .await;
}

#[tokio::test]
async fn code_generation_from_strings_is_off() {
    assert_fails(
        "import pyodide_js\npyodide_js.runPython.constructor('return 1')()",
        "EvalError",
    )
    .await;
}

#[tokio::test]
async fn there_is_no_network_and_it_fails_fast() {
    let started = Instant::now();
    assert_fails(
        "import urllib.request\nurllib.request.urlopen('http://127.0.0.1:9/', timeout=5)",
        "network access is disabled",
    )
    .await;
    assert!(started.elapsed() < Duration::from_secs(15));
    assert_fails(
        "import socket\nsocket.create_connection(('127.0.0.1', 9))",
        "network access is disabled",
    )
    .await;
}

#[tokio::test]
async fn host_environment_variables_are_not_visible() {
    std::env::set_var("MCP_CODE_MODE_TEST_SECRET", "hunter2");
    let o = execute("import os\nsorted(os.environ.items())").await;
    let text = o.result.to_string();
    assert!(
        !text.contains("hunter2") && !text.contains("MCP_CODE_MODE_TEST_SECRET"),
        "{text}"
    );
    let host_path = std::env::var("PATH").unwrap_or_default();
    assert!(!text.contains(&host_path), "the host's PATH leaked: {text}");
}

// ---- seeds ----------------------------------------------------------------------------------

const RANDOM_SCRIPT: &str = "import random, uuid, os\nprint(random.random(), uuid.uuid4(), os.urandom(8).hex(), hash('abc'), list({'x', 'y', 'z', 'w'}))";

async fn seeded(seed: Option<u64>) -> String {
    let mut config = crate::util::config(Limits::default());
    config.seed = seed;
    let o = execute_with(config, RANDOM_SCRIPT).await;
    assert_eq!(o.error, None);
    o.stdout
}

#[tokio::test]
async fn a_seed_gives_identical_bytes_and_no_seed_gives_fresh_entropy() {
    let (a, b, c) = (
        seeded(Some(42)).await,
        seeded(Some(42)).await,
        seeded(Some(43)).await,
    );
    assert_eq!(a, b);
    assert_ne!(a, c);
    let (d, e) = (seeded(None).await, seeded(None).await);
    assert_ne!(d, e);
    assert_ne!(d, a);
}

// ---- the tool bridge: an async Rust call exposed to Python -----------------------------------

/// `test.echo(**kwargs)` answers after a real async sleep; `test.fail()` reports a tool error.
struct EchoHost;

impl ToolHost for EchoHost {
    fn catalog(&self) -> Vec<ServerCatalog> {
        let spec = |name: &str, schema: Value| ToolSpec {
            name: name.into(),
            python_name: String::new(),
            description: format!("The {name} tool."),
            input_schema: schema,
            output_schema: None,
            annotations: None,
        };
        vec![ServerCatalog {
            server: "test".into(),
            description: "in-memory test server".into(),
            tools: vec![
                spec(
                    "echo",
                    json!({"type": "object", "properties": {"x": {"type": "integer"}}}),
                ),
                spec(
                    "get-sum",
                    json!({"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}, "required": ["a", "b"]}),
                ),
                spec("fail", json!({"type": "object"})),
            ].into(),
        }]
    }

    fn call(
        &self,
        _server: &str,
        tool: &str,
        args: Map<String, Value>,
    ) -> BoxFuture<'static, Result<Value, ToolCallError>> {
        let tool = tool.to_owned();
        Box::pin(async move {
            tokio::time::sleep(Duration::from_millis(20)).await;
            match tool.as_str() {
                "echo" => Ok(Value::Object(args)),
                "get-sum" => Ok(json!(
                    args["a"].as_f64().unwrap() + args["b"].as_f64().unwrap()
                )),
                _ => Err(ToolCallError::Tool("it broke".into())),
            }
        })
    }
}

async fn with_tools(code: &str) -> mcp_code_mode::engine::Outcome {
    let mut config = crate::util::config(Limits::default());
    config.tools = Arc::new(EchoHost);
    execute_with(config, code).await
}

#[tokio::test]
async fn an_async_rust_call_works_plainly_and_awaited() {
    let o = with_tools("a = tools.test.echo(x=1)\nb = await tools.test.echo(x=2)\n[a, b]").await;
    assert_eq!(o.error, None, "{}", o.stderr);
    assert_eq!(o.result, json!([{"x": 1}, {"x": 2}]));
    assert_eq!(o.tool_calls.len(), 2);
    assert!(o
        .tool_calls
        .iter()
        .all(|c| c.ok && c.server == "test" && c.tool == "echo" && c.ms >= 15.0));
}

/// What tells a plain call from an awaited one is learned once per code object, and forgotten
/// with it: a session's jobs (or one script's `exec`s) each bring code of their own.
#[tokio::test]
async fn what_a_call_learns_of_its_code_goes_with_the_code() {
    let o = with_tools(
        "import codemode, gc\n\
         for i in range(12):\n\
         \x20   exec(compile('tools.test.echo(x=1)', f'<job {i}>', 'exec'))\n\
         gc.collect()\n\
         [c.co_filename for c in codemode._AWAITED_CALLS]",
    )
    .await;
    assert_eq!(o.error, None, "{}", o.stderr);
    assert_eq!(o.tool_calls.len(), 12);
    assert_eq!(o.result, json!([]));
}

#[tokio::test]
async fn calls_work_inside_functions_and_coroutines_and_gather() {
    let code = "import asyncio\n\
def plain(n):\n    return tools.test.echo(x=n)['x']\n\
async def coro(n):\n    return (await tools.test.echo(x=n))['x']\n\
r = await asyncio.gather(coro(1), coro(2), tools.test.echo.aio(x=3))\n\
[plain(0), r[0], r[1], r[2]['x']]";
    let o = with_tools(code).await;
    assert_eq!(o.error, None, "{:?}", o.error);
    assert_eq!(o.result, json!([0, 1, 2, 3]));
}

#[tokio::test]
async fn dashed_names_are_mapped_and_tool_errors_raise_tool_error() {
    let code = "s = tools.test.get_sum(a=2, b=3)\n\
try:\n    tools.test.fail()\nexcept ToolError as e:\n    err = (e.server, e.tool, e.message, e.kind)\n\
[s, err, tools.test.get_sum.mcp_name]";
    let o = with_tools(code).await;
    assert_eq!(o.error, None, "{:?}", o.error);
    assert_eq!(
        o.result,
        json!([5.0, ["test", "fail", "it broke", "tool"], "get-sum"])
    );
    assert_eq!(
        o.tool_calls.iter().map(|c| c.ok).collect::<Vec<_>>(),
        vec![true, false]
    );
}

#[tokio::test]
async fn unknown_tools_suggest_close_names_and_signatures_come_from_the_schema() {
    let o = with_tools("tools.test.echoo(x=1)").await;
    let e = o.error.unwrap();
    assert_eq!(e.kind, "AttributeError");
    assert!(e.message.contains("Did you mean: echo"), "{}", e.message);
    let o = with_tools("help(tools.test.get_sum)").await;
    assert!(
        o.stdout.contains("get_sum(*, a: float, b: float) -> "),
        "{}",
        o.stdout
    );
    let o = with_tools("tools.test.get_sum(a=1)").await;
    assert!(o
        .error
        .unwrap()
        .message
        .contains("missing required keyword argument(s): 'b'"));
    let o = with_tools("tools.test.get_sum(a=1, b=2, c=3)").await;
    let e = o.error.unwrap();
    assert_eq!(e.kind, "TypeError");
    assert!(
        e.message.contains("unexpected keyword argument 'c'") && o.tool_calls.is_empty(),
        "{}",
        e.message
    );
}

// ---- snapshot and pool ----------------------------------------------------------------------

#[tokio::test]
async fn booting_without_the_snapshot_gives_the_same_python() {
    let script = "import json, sys\nprint(json.dumps({'v': sys.version_info[:2]}))\n6 * 7";
    let mut fresh = crate::util::config(Limits::default());
    fresh.snapshot = None;
    let a = execute_with(fresh, script).await;
    let b = execute(script).await;
    assert!(
        !mcp_code_mode::assets::snapshot().is_empty(),
        "the build embeds a snapshot"
    );
    assert_eq!(
        (a.stdout, a.result, a.error),
        (b.stdout.clone(), b.result, b.error)
    );
    assert_eq!(b.stdout, "{\"v\": [3, 14]}\n");
}

#[tokio::test]
async fn pooled_sandboxes_share_no_state() {
    let pool = mcp_code_mode::engine::Pool::new(
        Limits::default(),
        Some(mcp_code_mode::assets::snapshot()),
        2,
    );
    assert!(
        pool.wait_ready(2, Duration::from_secs(60)).await,
        "the pool fills"
    );
    let tools: Arc<dyn ToolHost> = Arc::new(EchoHost);
    let first = pool
        .take(tools.clone())
        .await
        .unwrap()
        .execute(Job::new("import random\nleak = 1\nrandom.random()"))
        .await;
    let second = pool
        .take(tools.clone())
        .await
        .unwrap()
        .execute(Job::new(
            "import random\n(random.random(), 'leak' in globals())",
        ))
        .await;
    assert_eq!(first.error, None);
    assert_ne!(
        second.result[0], first.result,
        "each sandbox draws its own random state"
    );
    assert_eq!(second.result[1], json!(false));
    // A pooled sandbox takes the tool host it is handed, not the one it booted with.
    let third = pool
        .take(tools)
        .await
        .unwrap()
        .execute(Job::new("tools.test.echo(x=5)"))
        .await;
    assert_eq!(third.result, json!({"x": 5}));
    assert!(
        pool.wait_ready(2, Duration::from_secs(60)).await,
        "the pool refills"
    );
}

/// One sandbox running a session's jobs in order (shared with `fork.rs`, which passes forked
/// children): each job sees the globals, imports and files the previous left, prints and tool
/// calls are each job's own, nothing a job left behind runs between jobs, the same seed gives
/// the same outputs, and a job past its timeout ends the sandbox for good.
pub async fn check_a_sessions_jobs<F, Fut>(make: F)
where
    F: Fn(Option<u64>) -> Fut,
    Fut: std::future::Future<Output = Sandbox>,
{
    use mcp_code_mode::engine::RunControl;
    async fn step(sandbox: &mut Sandbox, code: &str) -> mcp_code_mode::engine::Outcome {
        let (outcome, alive) = sandbox
            .execute_kept(Job::new(code), RunControl::new())
            .await;
        assert!(
            alive,
            "the sandbox ended after {code:?}: {:?}",
            outcome.error
        );
        assert_eq!(outcome.error, None, "{code}: {}", outcome.stderr);
        outcome
    }
    let steps = [
        "import json, random\nx = 41\nwith open('/tmp/kept.txt', 'w') as f:\n    f.write('kept')\nprint('one')\nrandom.random()",
        "print(open('/tmp/kept.txt').read())\n(x + 1, json.dumps([1]), random.random())",
    ];
    let mut session = make(Some(7)).await;
    let first = step(&mut session, steps[0]).await;
    let second = step(&mut session, steps[1]).await;
    assert_eq!(first.stdout, "one\n");
    assert_eq!(second.stdout, "kept\n", "each job's output is its own");
    assert_eq!(second.result[0], 42);
    assert_eq!(second.result[1], "[1]");
    // A task the job leaves running does not run between jobs (the isolate is not driven).
    let started = step(
        &mut session,
        "import asyncio\nticks = [0]\nasync def tick():\n    while True:\n        ticks[0] += 1\n        await asyncio.sleep(0.01)\nkeep = asyncio.ensure_future(tick())\nawait asyncio.sleep(0.05)\nticks[0]",
    )
    .await;
    tokio::time::sleep(Duration::from_millis(600)).await;
    let later = step(&mut session, "ticks[0]").await;
    let (before, after) = (
        started.result.as_i64().unwrap(),
        later.result.as_i64().unwrap(),
    );
    assert!(
        after - before < 10,
        "the task ticked {} times between jobs",
        after - before
    );
    // The same seed and the same jobs: the same outputs.
    let mut again = make(Some(7)).await;
    let first_again = step(&mut again, steps[0]).await;
    let second_again = step(&mut again, steps[1]).await;
    assert_eq!(
        (&first.result, &second.result),
        (&first_again.result, &second_again.result)
    );
    // A job past its timeout ends the sandbox; it takes no job after.
    let mut job = Job::new("print('before', flush=True)\nwhile True:\n    pass");
    job.timeout = Some(Duration::from_secs(1));
    let (timed_out, alive) = session.execute_kept(job, RunControl::new()).await;
    assert!(!alive);
    assert_eq!(timed_out.error.unwrap().kind, "TimeoutError");
    assert_eq!(timed_out.stdout, "before\n");
    let (after_end, alive) = session.execute_kept(Job::new("x"), RunControl::new()).await;
    assert!(!alive && after_end.error.is_some(), "{after_end:?}");
    // So does a MemoryError: the session's memory is spent.
    let (memory, alive) = again
        .execute_kept(Job::new("bytearray(1 << 30)"), RunControl::new())
        .await;
    assert_eq!(memory.error.unwrap().kind, "MemoryError");
    assert!(!alive);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thread_sandbox_runs_a_sessions_jobs_in_order() {
    check_a_sessions_jobs(|seed| async move {
        let config = mcp_code_mode::engine::SandboxConfig {
            seed,
            ..crate::util::config(Limits::default())
        };
        Sandbox::new(config).await.expect("sandbox boots")
    })
    .await;
}
