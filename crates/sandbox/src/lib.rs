//! mcp-code-mode-sandbox — the sandbox core: Pyodide in a deno_core V8 isolate (engine), the ops
//! between it and Rust (bridge), and the files it boots from (assets). It knows nothing of MCP:
//! tools reach it through [`bridge::ToolHost`]. The product's build.rs uses this crate to make the
//! memory snapshot the product embeds, so the snapshot is made by exactly the code that restores it.
//! `local` is the opt-in second executor beside the engine: host CPython, not a sandbox.

pub mod assets;
pub mod bridge;
pub mod engine;
pub mod local;
pub mod marker;
pub mod wheelcheck;
pub mod wheels;

/// An error and its causes in one line, `what: why: why`, as anyhow's `{:#}` prints them. Errors
/// here keep their causes as sources, out of their own words: whatever shows one to a person
/// outside anyhow shows it through this.
pub struct Chain<'a>(pub &'a (dyn std::error::Error + 'static));

impl std::fmt::Display for Chain<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut said = self.0.to_string();
        let mut next = self.0.source();
        while let Some(cause) = next {
            let words = cause.to_string();
            // Some errors (deno_core's, rmcp's) say their cause's words and return it too.
            if !said.contains(&words) {
                said.push_str(": ");
                said.push_str(&words);
            }
            next = cause.source();
        }
        f.write_str(&said)
    }
}
