//! mcp-code-mode: an MCP server that runs one Python script (Pyodide in a V8 isolate) which calls
//! the tools of the MCP servers the user configured. See ARCHITECTURE.md for the map.

pub mod assets;
pub mod bench;
pub mod bridge;
pub mod config;
pub mod debug;
pub mod engine;
pub mod hub;
pub mod parity;
pub mod server;
pub mod suggest;
