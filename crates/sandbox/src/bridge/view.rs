//! The catalogue as the sandbox's Python receives it, made once per catalogue version.
//!
//! Two levels: an index of servers (names, descriptions, tool counts, why one is down) made for
//! every job, since it is small and a down server's state reads differently by the second; and
//! per server the JSON of its tools (names, signatures, docstrings), rendered the first time any
//! job touches `tools.<server>` and kept for the catalogue version. A script that calls no tool
//! costs no rendering, and 50,000 tools are rendered once, not once per execution.

use super::signature::{docstring, python_name, signature};
use super::tools::ServerCatalog;
use parking_lot::Mutex;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

/// Each running server's tools and, once asked for, their rendering.
type Rendered = HashMap<String, (Arc<Vec<super::ToolSpec>>, OnceLock<String>)>;

/// The catalogue as Python sees it now.
pub struct PythonView {
    index: String,
    servers: Arc<Rendered>,
}

impl PythonView {
    pub fn new(catalog: &[ServerCatalog], unavailable: &[(String, String)]) -> Self {
        Self::with_rendered(catalog, unavailable, Arc::new(rendered(catalog)))
    }

    fn with_rendered(
        catalog: &[ServerCatalog],
        unavailable: &[(String, String)],
        servers: Arc<Rendered>,
    ) -> Self {
        let running = catalog.iter().map(|server| {
            json!({
                "server": server.server,
                "pythonName": python_name(&server.server),
                "description": server.description,
                "tools": server.tools.len(),
            })
        });
        let down = unavailable.iter().map(|(server, why)| {
            json!({
                "server": server,
                "pythonName": python_name(server),
                "description": "",
                "tools": 0,
                "unavailable": why,
            })
        });
        let index = Value::Array(running.chain(down).collect()).to_string();
        Self { index, servers }
    }

    /// JSON: `[{server, pythonName, description, tools: <count>, unavailable?}]`.
    pub fn index(&self) -> &str {
        &self.index
    }

    /// JSON of `server`'s tools, `[{name, pythonName, doc, signature}]`, rendered on first use;
    /// `None` when the server does not serve tools in this version.
    pub fn server_tools(&self, server: &str) -> Option<&str> {
        let (tools, rendered) = self.servers.get(server)?;
        Some(rendered.get_or_init(|| {
            let tools: Vec<Value> = tools
                .iter()
                .map(|tool| {
                    let sig = signature(tool);
                    json!({
                        "name": tool.name,
                        "pythonName": tool.py_name(),
                        "doc": docstring(tool, &sig),
                        "signature": sig,
                    })
                })
                .collect();
            Value::Array(tools).to_string()
        }))
    }
}

fn rendered(catalog: &[ServerCatalog]) -> Rendered {
    catalog
        .iter()
        .map(|s| (s.server.clone(), (s.tools.clone(), OnceLock::new())))
        .collect()
}

/// The renderings of the newest catalogue version seen, for hosts whose catalogue has one.
#[derive(Default)]
pub struct ViewCache(Mutex<Option<(u64, Arc<Rendered>)>>);

impl ViewCache {
    /// The view of `catalog`, reusing the renderings made for `version` if there are any. Read
    /// `version` before `catalog`, so renderings are never older than their key.
    pub fn view(
        &self,
        version: u64,
        catalog: &[ServerCatalog],
        unavailable: &[(String, String)],
    ) -> PythonView {
        let servers = {
            let mut cached = self.0.lock();
            match &*cached {
                Some((v, servers)) if *v == version => servers.clone(),
                _ => {
                    let servers = Arc::new(rendered(catalog));
                    *cached = Some((version, servers.clone()));
                    servers
                }
            }
        };
        PythonView::with_rendered(catalog, unavailable, servers)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bridge::ToolSpec;

    fn server(name: &str, tools: usize) -> ServerCatalog {
        ServerCatalog {
            server: name.into(),
            description: format!("{name} server"),
            tools: Arc::new(
                (0..tools)
                    .map(|i| ToolSpec {
                        name: format!("t-{i}"),
                        python_name: String::new(),
                        description: String::new(),
                        input_schema: json!({"type": "object", "properties": {"x": {"type": "integer"}}}),
                        output_schema: None,
                        annotations: None,
                    })
                    .collect(),
            ),
        }
    }

    #[test]
    fn the_index_names_servers_and_tools_render_per_server() {
        let view = PythonView::new(&[server("a-1", 3)], &[("b".into(), "starting".into())]);
        let index: Value = serde_json::from_str(view.index()).unwrap();
        assert_eq!(index[0]["pythonName"], "a_1");
        assert_eq!(index[0]["tools"], 3);
        assert_eq!(index[1]["unavailable"], "starting");
        let tools: Value = serde_json::from_str(view.server_tools("a-1").unwrap()).unwrap();
        assert_eq!(tools[2]["pythonName"], "t_2");
        assert_eq!(tools[2]["signature"]["params"][0]["name"], "x");
        assert!(view.server_tools("b").is_none());
    }

    #[test]
    fn a_version_is_rendered_once() {
        let cache = ViewCache::default();
        let catalog = [server("a", 1)];
        let first = cache.view(1, &catalog, &[]);
        let rendered = first.server_tools("a").unwrap().as_ptr();
        let again = cache.view(1, &catalog, &[("b".into(), "down".into())]);
        assert_eq!(again.server_tools("a").unwrap().as_ptr(), rendered);
        assert!(again.index().contains("down"), "the index is made afresh");
        let next = cache.view(2, &catalog, &[]);
        assert_ne!(next.server_tools("a").unwrap().as_ptr(), rendered);
    }
}
