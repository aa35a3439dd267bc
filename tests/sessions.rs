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
    checks!(stdio, thread: basics, idle, cap);

    /// Passes when the test binary or sessions.py is run directly, but under `cargo test` the
    /// third thread sandbox this check boots (a new session after a timed-out and a reset one)
    /// never answers within the client's 60 s: not understood yet (see the sessions report).
    #[test]
    #[ignore = "hangs under cargo test only; run with --ignored to investigate"]
    fn thread_limits() {
        super::check("limits", "stdio", "thread");
    }
}

mod http {
    checks!(http, fork: basics, limits, isolation);
    checks!(http, thread: basics, isolation);
}
