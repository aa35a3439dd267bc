//! The forked sandbox (`--sandbox fork`, the default): the kernel seals each child, and the parent
//! enforces the limits whatever the child does.

use crate::sandbox::REAL_GLOBAL;
use crate::util::{cli_env, json, text};
use std::process::Output;
use std::time::Instant;

/// `run <args> -` with `code` on stdin.
fn run(args: &[&str], env: &[(&str, &str)], code: &str) -> Output {
    let mut all = vec!["run"];
    all.extend_from_slice(args);
    all.push("-");
    cli_env(&all, env, code)
}

#[test]
fn a_sealed_child_cannot_open_connect_exec_or_signal() {
    // The probes run in the child after it sealed itself, before the script (tests-only build).
    let out = run(
        &["--json"],
        &[("MCP_CODE_MODE_ESCAPE_PROBES", "1")],
        "print('the script ran')",
    );
    let report = json(&out);
    let stdout = report["stdout"].as_str().unwrap_or_default();
    for attempt in [
        "open /etc/hostname: blocked",
        "openat /etc/hostname: blocked",
        "socket AF_INET: blocked",
        "socket AF_UNIX: blocked",
        "execve /bin/sh: blocked",
        "clone (fork): blocked",
        "ptrace: blocked",
        "kill the zygote: blocked",
        "write to fd 1: reaches /dev/null",
    ] {
        assert!(stdout.contains(attempt), "{attempt:?} not in:\n{stdout}");
    }
    assert!(!stdout.contains("ESCAPED"), "{stdout}");
    assert!(stdout.ends_with("the script ran\n"), "{stdout}");
    // The thread sandbox has no such seal (and no probes): the flag is what we measure.
    let thread = run(
        &["--json", "--sandbox", "thread"],
        &[("MCP_CODE_MODE_ESCAPE_PROBES", "1")],
        "print('the script ran')",
    );
    assert_eq!(json(&thread)["stdout"], "the script ran\n");
}

#[test]
fn past_its_timeout_a_child_is_killed_and_its_output_kept() {
    let out = run(
        &["--json", "--timeout", "1"],
        &[],
        "print('before', flush=True)\nwhile True:\n    pass\n",
    );
    let report = json(&out);
    assert_eq!(report["error"]["type"], "TimeoutError", "{report}");
    assert_eq!(report["stdout"], "before\n");
    let ms = report["duration_ms"].as_f64().unwrap();
    assert!(
        (1000.0..1100.0).contains(&ms),
        "back {ms} ms after a 1 s limit"
    );
}

#[test]
fn a_child_that_dies_by_a_signal_is_named_and_the_next_one_runs() {
    let started = Instant::now();
    let out = run(
        &["--json"],
        &[("MCP_CODE_MODE_ESCAPE_PROBES", "abort")],
        "print('never')",
    );
    let report = json(&out);
    let message = report["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("killed by SIGABRT") && message.contains("crash or fatal error"),
        "{report}"
    );
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(started.elapsed().as_secs() < 20);
    let next = run(&["--json"], &[], "1 + 1");
    assert_eq!(json(&next)["result"], 2);
}

#[test]
fn a_child_that_dies_says_why_first() {
    // V8's own fatal paths (CHECK failures; out of memory) and a panic of ours: what they print
    // goes to the child's stderr, /dev/null; the child tells the parent before it dies.
    let ended = "the sandbox ended without finishing the script: ";
    for (probe, kind, says) in [
        (
            "v8-fatal",
            "RuntimeError",
            format!("{ended}V8 fatal error: Check failed: escape probe."),
        ),
        (
            "v8-oom",
            "MemoryError",
            "the script used up the sandbox's memory (300 MiB, --memory-mb)".into(),
        ),
        (
            "panic",
            "RuntimeError",
            format!(
                "{ended}the sandbox process panicked at crates/sandbox/src/engine/zygote/child.rs:"
            ),
        ),
    ] {
        let out = run(
            &["--json", "--memory-mb", "300"],
            &[("MCP_CODE_MODE_ESCAPE_PROBES", probe)],
            "print('never')",
        );
        let report = json(&out);
        let message = report["error"]["message"].as_str().unwrap_or_default();
        assert_eq!(report["error"]["type"], kind, "{probe}: {report}");
        assert!(message.starts_with(&says), "{probe}: {report}");
        assert!(!report["stdout"]
            .as_str()
            .unwrap_or_default()
            .contains("never"));
    }
}

#[test]
fn a_child_generates_no_code_from_strings() {
    // The zygote sets its own V8 flags (single-threaded): this one must be among them.
    let out = run(
        &["--json"],
        &[],
        "import pyodide_js\npyodide_js.runPython.constructor('return 1')()",
    );
    let report = json(&out);
    let error = report["error"].to_string();
    assert!(error.contains("EvalError"), "{report}");
}

#[test]
fn memory_bombs_are_stopped_in_a_child() {
    for bomb in [
        "x = []\nwhile True:\n    x.append(bytearray(1 << 20))\n",
        "b = []\nwhile True:\n    b.append(g.ArrayBuffer.new(1 << 24))\n",
        "m = g.WebAssembly.Memory.new(obj(initial=1))\nwhile True:\n    g.WebAssembly.Memory.prototype.grow.call(m, 256)\n",
        "keep = [g.WebAssembly.Memory.new(obj(initial=1024)) for _ in range(64)]",
    ] {
        let code = format!("{REAL_GLOBAL}\n{bomb}");
        let out = run(&["--json", "--memory-mb", "256"], &[], &code);
        let report = json(&out);
        let kind = report["error"]["type"].as_str().unwrap_or_default();
        let message = report["error"]["message"].as_str().unwrap_or_default();
        assert!(
            kind == "MemoryError" || message.contains("memory") || message.contains("--memory-mb"),
            "{bomb}: {report}"
        );
    }
}

#[test]
fn sandboxes_of_both_kinds_start_with_the_compiled_code_the_build_made() {
    // V8 takes the build's code only in a process with the build's V8, flags and CPU: were it
    // refused, a zygote (or a process's first thread sandbox) would compile CPython's
    // interpreter loop again (~0.2 s of each cold start) and every sandbox would parse and
    // compile the JS it runs (~40 ms), and the result would still be right — so the log is what
    // tells. Thread sandboxes run with the zygote's flags for this (`isolate::set_v8_flags`).
    for kind in ["fork", "thread"] {
        let out = run(
            &["--sandbox", kind],
            &[("MCP_CODE_MODE_LOG", "mcp_code_mode_sandbox=debug")],
            "print(1)",
        );
        assert_eq!(text(&out.stdout), "1\n", "{kind}");
        let log = text(&out.stderr);
        assert!(
            log.contains("Pyodide's compiled code from the build taken"),
            "{kind}: {log}"
        );
        for module in [
            "codemode/main_deno.js",
            "codemode/host_deno.js",
            "codemode/runner.js",
            "pyodide/pyodide.mjs",
            "pyodide/pyodide.asm.mjs",
        ] {
            assert!(
                log.contains(&format!(
                    "file:///{module}: offered to V8 with the build's code cache"
                )),
                "{kind}, {module}: {log}"
            );
        }
        assert!(!log.contains("did not take"), "{kind}: {log}");
    }
}

#[test]
fn fork_and_thread_sandboxes_print_the_same_bytes() {
    let code = "import random, uuid, os\nprint(random.random(), uuid.uuid4(), os.urandom(4).hex())\n{'h': hash('x') != 0}";
    let strip = |out: &Output| {
        let mut v = json(out);
        v.as_object_mut().unwrap().remove("duration_ms");
        v
    };
    let fork = strip(&run(&["--json", "--seed", "42"], &[], code));
    let again = strip(&run(&["--json", "--seed", "42"], &[], code));
    let thread = strip(&run(
        &["--json", "--seed", "42", "--sandbox", "thread"],
        &[],
        code,
    ));
    assert_eq!(fork, again);
    assert_eq!(fork, thread);
    let unseeded = |kind: &str| strip(&run(&["--json", "--sandbox", kind], &[], code));
    assert_ne!(
        unseeded("fork")["stdout"],
        unseeded("fork")["stdout"],
        "fresh entropy per child"
    );
}

/// The server's pool: children forked (and sealed) ahead of demand, from a zygote that warms up
/// between forks. A spare serves a seeded job as a fresh fork would (before warm-up ends and
/// after, when it copies ahead the pages a job writes), and nothing of the zygote's warm-up
/// (the prints, source, files or modules of its steps, the tools it calls) reaches a job forked
/// before, during or after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn children_forked_ahead_of_demand_run_jobs_as_fresh_ones() {
    use mcp_code_mode::engine::{Job, Limits, Pool, SandboxConfig, ZygoteCommand};
    use std::time::Duration;
    let command = ZygoteCommand {
        program: crate::util::BIN.into(),
        args: vec!["__zygote".into()],
    };
    let pool = Pool::forks(command, Limits::default(), 2);
    let wait = Duration::from_secs(120);
    assert!(pool.wait_ready(2, wait).await, "two spares forked");
    let seeded = || SandboxConfig {
        seed: Some(42),
        ..SandboxConfig::new(Limits::default(), None)
    };
    // What a warm-up step could leave behind: its source, its scratch folder, its module, its
    // tools (engine::zygote::WarmUpTools) and the code objects of its calls.
    let code = "import random, linecache, os, sys, codemode\nprint(random.random(), [k for k in linecache.cache if 'warm' in k], os.path.exists('/tmp/codemode-warm'), 'warm_pkg' in sys.modules, dir(tools), [c.co_filename for c in codemode._AWAITED_CALLS])";
    let from_spare = pool
        .take_for(seeded())
        .await
        .unwrap()
        .execute(Job::new(code))
        .await;
    // Children forked while the zygote warms up, between the steps of its rounds.
    for _ in 0..6 {
        let sandbox = pool.take_for(seeded()).await.unwrap();
        let mid_warm_up = sandbox.execute(Job::new(code)).await;
        assert_eq!(
            from_spare.stdout, mid_warm_up.stdout,
            "{}",
            mid_warm_up.stderr
        );
    }
    assert!(pool.wait_warm(wait).await, "the zygote finishes warming up");
    // From here on each child copies ahead the pages a job writes (engine/zygote/prefault.rs),
    // ~1,250 for `print(1)`, and maps the pages of code and read-only data it reads: learned,
    // and the jobs below still give the same bytes.
    let ahead = pool.pages_ahead().await.unwrap_or_default();
    assert!(ahead.copied > 200, "{ahead:?}: pages copied ahead of jobs");
    assert!(ahead.mapped > 200, "{ahead:?}: pages mapped ahead of jobs");
    assert!(pool.wait_ready(2, wait).await);
    let spare = pool.take_for(seeded()).await.unwrap();
    let mcp_code_mode::engine::Sandbox::Forked(forked) = &spare else {
        panic!("a forked sandbox")
    };
    // Copied, not merely read: the spare holds them as its own before it has a job. And mapped:
    // a fork maps no page of a file mapping never written (the binary's code), so without the
    // read-ahead a spare would have mapped only what its own start ran.
    let smaps = || std::fs::read_to_string(format!("/proc/{}/smaps", forked.pid())).ok();
    let kib = |line: &str, field: &str| {
        line.strip_prefix(field)
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<usize>().ok())
    };
    // (Private_Dirty KiB, Rss KiB of read-only file mappings)
    let own_and_mapped = || {
        let smaps = smaps()?;
        let (mut dirty, mut mapped, mut read_only_file) = (0, 0, false);
        for line in smaps.lines() {
            let fields: Vec<&str> = line.split_ascii_whitespace().collect();
            // A mapping's line: "start-end perms offset device inode [path]".
            if fields.len() >= 5 && fields[0].contains('-') && !fields[0].ends_with(':') {
                read_only_file = fields[1].starts_with("r-") && fields[4] != "0";
            } else if let Some(k) = kib(line, "Private_Dirty:") {
                dirty += k;
            } else if let Some(k) = kib(line, "Rss:") {
                mapped += if read_only_file { k } else { 0 };
            }
        }
        Some((dirty, mapped))
    };
    let done = |now: Option<(usize, usize)>| {
        now.is_some_and(|(dirty, mapped)| {
            dirty >= ahead.copied * 4 * 9 / 10 && mapped >= ahead.mapped * 4 * 9 / 10
        })
    };
    let until = std::time::Instant::now() + Duration::from_secs(10);
    while !done(own_and_mapped()) && std::time::Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        done(own_and_mapped()),
        "{:?} KiB (own, read-only files mapped) of the spare's for {ahead:?}",
        own_and_mapped()
    );
    assert_holds_no_dead_copies(forked.pid());
    let after_warm = spare.execute(Job::new(code)).await;
    assert!(from_spare.error.is_none(), "{}", from_spare.stderr);
    assert_eq!(
        from_spare.stdout, after_warm.stdout,
        "same seed, same bytes"
    );
    assert!(
        from_spare.stdout.ends_with(" [] False False [] []\n"),
        "{}",
        from_spare.stdout
    );
    // A child's output has the whole cap: what the warm-up printed was forgotten, not inherited.
    let cap = Limits::default().max_output;
    let full = pool
        .take(std::sync::Arc::new(mcp_code_mode::bridge::NoTools))
        .await
        .unwrap()
        .execute(Job::new(format!("print('x' * {})", cap - 1)))
        .await;
    assert_eq!(
        full.stdout.len(),
        cap,
        "{}",
        &full.stdout[cap.min(full.stdout.len()) - 100..]
    );
    let plain = pool
        .take(std::sync::Arc::new(mcp_code_mode::bridge::NoTools))
        .await
        .unwrap()
        .execute(Job::new("print(1)"))
        .await;
    assert_eq!((plain.stdout.as_str(), plain.stderr.as_str()), ("1\n", ""));
    // What the warm zygote holds is immortal (js/codemode.py's `_immortalize`): a job writes no
    // reference count into it, so the kernel copies none of its pages for that. What a job makes
    // is not; and a module's state still changes and reads back.
    let immortal = pool
        .take(std::sync::Arc::new(mcp_code_mode::bridge::NoTools))
        .await
        .unwrap()
        .execute(Job::new(
            "import sys, json\nmine = object()\njson.mine = mine\ndel json.dumps\n\
             print(sys._is_immortal(json), sys._is_immortal(json.loads), sys._is_immortal(mine), \
             json.mine is mine, hasattr(json, 'dumps'))",
        ))
        .await;
    assert_eq!(
        immortal.stdout, "True True False True False\n",
        "{}",
        immortal.stderr
    );
}

/// A forked child running a session's jobs in order (the checks are `engine.rs`'s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forked_child_runs_a_sessions_jobs_in_order() {
    use mcp_code_mode::engine::{Limits, Pool, SandboxConfig, ZygoteCommand};
    let command = ZygoteCommand {
        program: crate::util::BIN.into(),
        args: vec!["__zygote".into()],
    };
    let pool = Pool::forks(command, Limits::default(), 0);
    crate::engine::check_a_sessions_jobs(|seed| {
        let pool = pool.clone();
        async move {
            let config = SandboxConfig {
                seed,
                ..SandboxConfig::new(Limits::default(), None)
            };
            pool.take_for(config).await.expect("a child forks")
        }
    })
    .await;
}

/// A spare child is a copy of the warm zygote, and every fork copies the page tables of what the
/// zygote holds (and every exit frees them): it must hold no byte it will never use again. Two
/// such copies outlived the zygote's boot once, unseen by any other test: the restored snapshot
/// (31 MB, referenced from the boot's JS) and our copy of Pyodide's module (9.4 MB; V8 keeps its
/// own). Both are found by their first 64 bytes, at any 16-byte boundary of the child's writable
/// anonymous memory. And its wasm memory is backed by huge pages where the kernel allows them.
fn assert_holds_no_dead_copies(pid: i32) {
    use std::os::unix::fs::FileExt;
    let module = mcp_code_mode::assets::pyodide_file("pyodide.asm.wasm").unwrap()[..64].to_vec();
    let snapshot = mcp_code_mode::assets::snapshot()[..64].to_vec();
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
    let mem = std::fs::File::open(format!("/proc/{pid}/mem")).unwrap();
    let (mut modules, mut snapshots) = (0, 0);
    let mut chunk = vec![0u8; 1 << 20];
    for line in maps.lines() {
        let fields: Vec<&str> = line.split_ascii_whitespace().collect();
        let named = fields.get(5).is_some_and(|name| *name != "[heap]");
        if fields[4] != "0" || !fields[1].starts_with("rw") || named {
            continue;
        }
        let (start, end) = fields[0].split_once('-').unwrap();
        let (start, end) = (
            u64::from_str_radix(start, 16).unwrap(),
            u64::from_str_radix(end, 16).unwrap(),
        );
        // Chunks overlap by 48 bytes: a 64-byte head at a 16-byte boundary across a chunk's end
        // is seen in the next chunk, and one that ends within the overlap in this chunk only.
        let mut at = start;
        while at < end {
            let len = chunk.len().min((end - at) as usize);
            mem.read_exact_at(&mut chunk[..len], at)
                .unwrap_or_else(|e| panic!("reading {line}: {e}"));
            for i in (0..len.saturating_sub(63)).step_by(16) {
                let head = &chunk[i..i + 64];
                modules += usize::from(head == module);
                snapshots += usize::from(head == snapshot);
            }
            at += len as u64 - 48;
            if len < chunk.len() {
                break;
            }
        }
    }
    assert_eq!(
        (modules, snapshots),
        (1, 0),
        "copies of Pyodide's module (V8's own is one) and of the snapshot in {maps}"
    );
    // MADV_COLLAPSE came with Linux 6.1, and does nothing where THP is `never`.
    let thp = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled");
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
    let mut version = release
        .split(['.', '-'])
        .map(|n| n.parse::<u32>().unwrap_or(0));
    let at_least_6_1 = (version.next().unwrap_or(0), version.next().unwrap_or(0)) >= (6, 1);
    if at_least_6_1 && thp.is_ok_and(|mode| !mode.contains("[never]")) {
        let smaps = std::fs::read_to_string(format!("/proc/{pid}/smaps")).unwrap();
        let huge_kib: usize = smaps
            .lines()
            .filter_map(|l| l.strip_prefix("AnonHugePages:"))
            .filter_map(|v| v.trim().trim_end_matches("kB").trim().parse::<usize>().ok())
            .sum();
        assert!(huge_kib >= 16 << 10, "{huge_kib} KiB in huge pages");
    }
}
