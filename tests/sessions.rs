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
    checks!(stdio, fork: basics, limits, idle, cap, seed);
    // `limits` with threads also keeps a regression: sessions with a memory limit of their own
    // get freshly booted isolates that sit idle between jobs, and their background compile jobs
    // once held V8's shared workers for good (see `isolate::init_v8`).
    checks!(stdio, thread: basics, limits, idle, cap, seed);
}

mod http {
    checks!(http, fork: basics, limits, isolation);
    checks!(http, thread: basics, isolation);
}
