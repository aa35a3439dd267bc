//! Approvals (issue #15) driven by the real Python MCP client's elicitation callback against the
//! real filesystem server (its write tools are annotated destructive): accept, decline, cancel and
//! allow-all, a clock paused while the person answers, a denied tool, a client that cannot be
//! asked, and --approve-all; in both protocol modes (`legacy`: elicitation/create; `auto`:
//! 2026-07-28's input_required), over stdio and over `serve --http`.

fn check(name: &str, mode: &str, transport: &str) {
    crate::util::python_driver(
        "approvals.py",
        &[name, "--mode", mode, "--transport", transport],
        &format!("ok: {name} ({mode}"),
    );
}

macro_rules! checks {
    ($transport:ident: $($name:ident),* $(,)?) => {
        mod $transport {
            mod legacy { $( #[test] fn $name() { super::super::check(stringify!($name), "legacy", stringify!($transport)); } )* }
            mod auto { $( #[test] fn $name() { super::super::check(stringify!($name), "auto", stringify!($transport)); } )* }
        }
    };
}

checks!(stdio: accept, decline, cancel, allow_all, paused_clock, denied, unasked, approve_all);
checks!(http: accept, decline, cancel, allow_all, paused_clock, unasked, approve_all);

/// `serve --http --stateless`: a 2026-07-28 client is asked as with sessions (`input_required`
/// needs none); a 2025-11-25 client has no session to carry an elicitation's answer, so `ask` is
/// refused for it, at once.
mod http_stateless {
    #[test]
    fn auto_accept() {
        super::check("accept", "auto", "http-stateless");
    }
    #[test]
    fn auto_cancel() {
        super::check("cancel", "auto", "http-stateless");
    }
    #[test]
    fn legacy_is_refused() {
        super::check("stateless_refused", "legacy", "http-stateless");
    }
}

/// The local executor asks the same way, and its timeout's clock stops while the person answers.
mod local_executor {
    fn check(name: &str) {
        crate::util::python_driver(
            "approvals.py",
            &[name, "--mode", "legacy", "--executor", "local"],
            &format!("ok: {name} (legacy"),
        );
    }
    #[test]
    fn accept() {
        check("accept");
    }
    #[test]
    fn cancel() {
        check("cancel");
    }
    #[test]
    fn paused_clock() {
        check("paused_clock");
    }
}
