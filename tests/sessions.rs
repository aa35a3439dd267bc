//! execute_code's sessions driven by a real MCP client (PyPI `mcp` 2.3.0,
//! `tests/mcp_client/sessions.py`), over stdio and HTTP, with forked and thread sandboxes. The
//! engine's side (one sandbox running a session's jobs) is in `engine.rs` and `fork.rs`.

fn check(name: &str, transport: &str, sandbox: &str) {
    crate::util::python_driver(
        "sessions.py",
        &[name, "--transport", transport, "--sandbox", sandbox],
        &format!("ok: {name} ({transport}, {sandbox}"),
    );
}

macro_rules! checks {
    ($transport:ident, $sandbox:ident: $($name:ident),* $(,)?) => {
        mod $sandbox {
            $( #[test] fn $name() { super::super::check(stringify!($name), stringify!($transport), stringify!($sandbox)); } )*
        }
    };
}

mod stdio {
    checks!(stdio, fork: basics, limits, idle, cap);
    // No `limits` with threads: its --code-session-memory-mb differs from --memory-mb, which
    // `serve --sandbox thread` refuses (see `a_thread_server_refuses_a_session_memory_of_its_own`).
    checks!(stdio, thread: basics, idle, cap);
}

mod http {
    checks!(http, fork: basics, limits, isolation);
    checks!(http, thread: basics, isolation);
}

/// Isolates with two heap limits in one process hung every later boot (V8's shared worker
/// threads waited on a GC for good): `--sandbox thread` refuses a session memory of its own.
#[test]
fn a_thread_server_refuses_a_session_memory_of_its_own() {
    let out = crate::util::cli(
        &[
            "serve",
            "--sandbox",
            "thread",
            "--code-session-memory-mb",
            "160",
        ],
        "",
    );
    let stderr = crate::util::text(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("--code-session-memory-mb") && stderr.contains("--sandbox fork"),
        "{stderr}"
    );
}
