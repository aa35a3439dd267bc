//! mcp-code-mode: an MCP server that runs one Python script (Pyodide in a V8 isolate) which calls
//! the tools of the MCP servers the user configured. See ARCHITECTURE.md for the map.

// The sandbox core (crates/sandbox), under the names the rest of the crate uses.
pub use mcp_code_mode_sandbox::{bridge, engine, local};

pub mod approval;
pub mod assets;
pub mod config;
pub mod debug;
pub mod hub;
pub mod log;
#[cfg(feature = "parity")]
pub mod parity;
pub mod replay;
pub mod server;
pub mod suggest;
pub mod text;
