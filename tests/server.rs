//! The MCP front driven by a real MCP client (PyPI `mcp` 2.3.0) against real downstream servers
//! (tests/fixtures), in both protocol modes: `legacy` (2025-11-25) and `auto` (2026-07-28).

fn check(name: &str, mode: &str) {
    check_over(name, mode, "stdio")
}

fn check_over(name: &str, mode: &str, transport: &str) {
    crate::util::python_driver(
        "checks.py",
        &[name, "--mode", mode, "--transport", transport],
        &format!("ok: {name} ({mode}"),
    );
}

macro_rules! checks {
    ($($name:ident),* $(,)?) => {
        mod legacy { $( #[test] fn $name() { super::check(stringify!($name), "legacy"); } )* }
        mod auto { $( #[test] fn $name() { super::check(stringify!($name), "auto"); } )* }
    };
}

checks!(
    catalog,
    workflow,
    structured,
    dashed,
    errors,
    progress,
    kill_downstream,
    cancel,
    concurrent,
    limits,
    list_changed,
    starting,
    many
);

/// The same checks through `serve --http` (with a bearer token), and what only HTTP has. Over
/// 2026-07-28 (`auto`) HTTP has no sessions, so no stream a server could push
/// tools/list_changed on: that check runs in `legacy` only.
mod http {
    macro_rules! over_http {
        ($mode:ident: $($name:ident),* $(,)?) => {
            mod $mode { $( #[test] fn $name() { super::super::check_over(stringify!($name), stringify!($mode), "http"); } )* }
        };
    }
    over_http!(legacy: catalog, workflow, structured, errors, progress, cancel, concurrent, list_changed, http_front);
    over_http!(auto: catalog, workflow, structured, errors, progress, cancel, concurrent, http_front);
}
