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
