//! The one integration-test binary (each V8-linking binary weighs ~65 MB): modules by layer.

mod approvals;
mod cli;
mod data;
mod downstream;
mod engine;
mod fork;
mod http;
mod hub;
mod local;
mod packages;
#[cfg(feature = "parity")]
mod parity;
mod remote;
mod replay;
mod sandbox;
mod server;
mod sessions;
mod util;
