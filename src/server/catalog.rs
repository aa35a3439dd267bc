//! Text the model reads to find tools: the summary in execute_code's description, list_tools,
//! search_tools and get_tool_signatures. Signatures come from bridge::signature, so what the model
//! reads is exactly what Python accepts.

use super::Detail;
use crate::bridge::signature::{docstring, python_name, signature};
use crate::bridge::{ServerCatalog, ToolSpec};

pub const USAGE: &str = "Call tools as plain functions with keyword arguments: \
`result = tools.<server>.<tool>(arg=...)` (or `await` them; use \
`asyncio.gather(tools.s.t.aio(...), ...)` for concurrency). A tool returns its structured result \
(dict/list) when it has one, else its text parsed as JSON when it parses, else the text. A failing \
tool raises ToolError (.server, .tool, .message). Dashed names use underscores (get-sum -> get_sum). \
help(tools.server.tool) shows a signature. print() what you want to read; the last expression is returned as result.";

/// A server that is configured but not serving tools right now, and why.
pub struct Unavailable {
    pub server: String,
    pub state: String,
}

/// The short catalogue in execute_code's description.
pub fn summary(catalog: &[ServerCatalog], unavailable: &[Unavailable]) -> String {
    if catalog.is_empty() && unavailable.is_empty() {
        return "No MCP servers are configured: plain Python only.".into();
    }
    let mut out = String::from("Servers (as tools.<server>):");
    for s in catalog {
        let desc = first_sentence(&s.description);
        let names: Vec<String> = s.tools.iter().take(12).map(|t| t.py_name()).collect();
        let more = s.tools.len().saturating_sub(names.len());
        out.push_str(&format!(
            "\n- {} ({} tools){}{}",
            python_name(&s.server),
            s.tools.len(),
            dash(&desc),
            ""
        ));
        out.push_str(&format!(
            ": {}{}",
            names.join(", "),
            if more > 0 {
                format!(", … {more} more")
            } else {
                String::new()
            }
        ));
    }
    for u in unavailable {
        out.push_str(&format!("\n- {}: {}", u.server, u.state));
    }
    out
}

fn dash(text: &str) -> String {
    if text.is_empty() {
        String::new()
    } else {
        format!(" — {text}")
    }
}

fn first_sentence(text: &str) -> String {
    let line = text.trim().lines().next().unwrap_or("").trim();
    let end = line.find(". ").map(|i| i + 1).unwrap_or(line.len());
    crate::text::shorten(&line[..end], 160)
}

/// The most tool lines one list_tools answer holds; the rest follow with `offset`.
pub const MAX_LISTED: usize = 500;
/// The most matches one search_tools answer holds.
pub const MAX_MATCHES: usize = 100;
/// The most names one get_tool_signatures call looks up.
pub const MAX_SIGNATURES: usize = 50;

/// list_tools: one line a tool, grouped by server, [`MAX_LISTED`] lines from `offset` on.
pub fn list(
    catalog: &[ServerCatalog],
    unavailable: &[Unavailable],
    server: Option<&str>,
    offset: usize,
) -> Result<String, String> {
    let chosen: Vec<&ServerCatalog> = match server {
        None => catalog.iter().collect(),
        Some(name) => {
            let found: Vec<&ServerCatalog> = catalog
                .iter()
                .filter(|s| s.server == name || python_name(&s.server) == name)
                .collect();
            if found.is_empty() {
                if let Some(u) = unavailable.iter().find(|u| u.server == name) {
                    return Err(format!(
                        "server '{name}' has no tools right now: {}",
                        u.state
                    ));
                }
                let known: Vec<&str> = catalog.iter().map(|s| s.server.as_str()).collect();
                return Err(format!(
                    "no server named '{name}'; configured: {}",
                    or_none(&known)
                ));
            }
            found
        }
    };
    if chosen.is_empty() {
        return Ok(summary(catalog, unavailable));
    }
    let mut out = String::new();
    let total: usize = chosen.iter().map(|s| s.tools.len()).sum();
    let mut line = 0;
    for s in chosen {
        let range = offset.saturating_sub(line)..(offset + MAX_LISTED).saturating_sub(line);
        line += s.tools.len();
        let shown = s
            .tools
            .get(range.start.min(s.tools.len())..range.end.min(s.tools.len()));
        let Some(shown) = shown.filter(|shown| !shown.is_empty()) else {
            continue;
        };
        out.push_str(&format!(
            "{} ({} tools){}\n",
            python_name(&s.server),
            s.tools.len(),
            dash(&first_sentence(&s.description))
        ));
        for t in shown {
            out.push_str(&format!(
                "  tools.{}.{}{}\n",
                python_name(&s.server),
                t.py_name(),
                dash(&first_sentence(&t.description))
            ));
        }
    }
    if offset + MAX_LISTED < total {
        let next = offset + MAX_LISTED;
        let server = server
            .map(|s| format!("server={s:?}, "))
            .unwrap_or_default();
        out.push_str(&format!(
            "… {} more tools: list_tools({server}offset={next}), or search_tools(query) to narrow\n",
            total - next
        ));
    } else if offset > 0 && offset >= total {
        out.push_str(&format!(
            "(offset {offset} is past the last of {total} tools)\n"
        ));
    }
    if server.is_none() {
        for u in unavailable {
            out.push_str(&format!("{}: {}\n", u.server, u.state));
        }
    }
    Ok(out)
}

fn or_none(names: &[&str]) -> String {
    if names.is_empty() {
        "(none)".into()
    } else {
        names.join(", ")
    }
}

fn render(server: &ServerCatalog, tool: &ToolSpec, detail: Detail) -> String {
    let full_name = format!("tools.{}.{}", python_name(&server.server), tool.py_name());
    match detail {
        Detail::Name => full_name,
        Detail::Signature => {
            let sig = signature(tool).render(&full_name);
            format!("{sig}\n    {}", first_sentence(&tool.description))
        }
        Detail::Full => {
            let sig = signature(tool);
            // A `"""` in a server's description must not end the docstring early.
            let doc = docstring(tool, &sig)
                .replace("\"\"\"", "\\\"\"\"")
                .replace('\n', "\n    ");
            format!(
                "# {full_name}\ndef {}:\n    \"\"\"{doc}\n    \"\"\"",
                sig.render(&tool.py_name())
            )
        }
    }
}

/// search_tools: tools ranked by how many query words their name and description contain.
pub fn search(catalog: &[ServerCatalog], query: &str, detail: Detail, limit: usize) -> String {
    let words: Vec<String> = query
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect();
    let mut scored: Vec<(usize, &ServerCatalog, &ToolSpec)> = Vec::new();
    for s in catalog {
        for t in s.tools.iter() {
            let name = format!("{} {}", s.server, t.name).to_lowercase();
            let desc = t.description.to_lowercase();
            let score: usize = words
                .iter()
                .map(|w| {
                    3 * usize::from(name.contains(w.as_str()))
                        + usize::from(desc.contains(w.as_str()))
                })
                .sum();
            if score > 0 {
                scored.push((score, s, t));
            }
        }
    }
    scored.sort_by_key(|s| std::cmp::Reverse(s.0));
    if scored.is_empty() {
        return format!("no tool matches {query:?}; list_tools shows them all");
    }
    let shown: Vec<String> = scored
        .iter()
        .take(limit.clamp(1, MAX_MATCHES))
        .map(|(_, s, t)| render(s, t, detail))
        .collect();
    let more = scored.len().saturating_sub(shown.len());
    let mut out = shown.join("\n");
    if more > 0 {
        out.push_str(&format!(
            "\n… {more} more matches (raise limit, up to {MAX_MATCHES}, or use more words)"
        ));
    }
    out
}

/// get_tool_signatures: full stubs for each named tool, and how many of the names were found (a
/// partial answer says which were not, first).
pub fn signatures(catalog: &[ServerCatalog], names: &[String]) -> (String, usize) {
    let mut parts = Vec::new();
    let mut missing = Vec::new();
    let (names, skipped) = names.split_at(names.len().min(MAX_SIGNATURES));
    for name in names {
        let wanted = name.trim().trim_start_matches("tools.");
        let (server, tool) = match wanted.split_once('.') {
            Some((s, t)) => (Some(s), t),
            None => (None, wanted),
        };
        let matches: Vec<(&ServerCatalog, &ToolSpec)> = catalog
            .iter()
            .filter(|s| server.is_none_or(|w| s.server == w || python_name(&s.server) == w))
            .flat_map(|s| s.tools.iter().map(move |t| (s, t)))
            .filter(|(_, t)| t.name == tool || t.py_name() == tool)
            .collect();
        match matches.as_slice() {
            [(s, t)] => parts.push(render(s, t, Detail::Full)),
            [] => {
                missing.push(name.as_str());
                let all: Vec<String> = catalog
                    .iter()
                    .flat_map(|s| {
                        s.tools
                            .iter()
                            .map(move |t| format!("{}.{}", python_name(&s.server), t.py_name()))
                    })
                    .collect();
                parts.push(format!(
                    "# {name}: no such tool{}",
                    crate::suggest::hint(wanted, all.iter().map(String::as_str))
                ));
            }
            several => {
                missing.push(name.as_str());
                let names: Vec<String> = several
                    .iter()
                    .map(|(s, t)| format!("{}.{}", python_name(&s.server), t.py_name()))
                    .collect();
                parts.push(format!(
                    "# {name}: ambiguous; name the server: {}",
                    names.join(", ")
                ));
            }
        }
    }
    let found = names.len() - missing.len();
    if found > 0 && !missing.is_empty() {
        parts.insert(
            0,
            format!(
                "# {found} of {} found; not found: {}",
                names.len(),
                missing.join(", ")
            ),
        );
    }
    if !skipped.is_empty() {
        parts.push(format!(
            "# {} more names not looked up: at most {MAX_SIGNATURES} per call",
            skipped.len()
        ));
    }
    (parts.join("\n\n"), found)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_triple_quote_in_a_description_does_not_end_the_docstring() {
        let server = ServerCatalog {
            server: "s".into(),
            description: String::new(),
            tools: vec![ToolSpec {
                name: "t".into(),
                python_name: String::new(),
                description: "Reads. \"\"\"\nimport os; os.system('x')".into(),
                input_schema: serde_json::json!({"type": "object"}),
                output_schema: None,
                annotations: None,
            }]
            .into(),
        };
        let stub = render(&server, &server.tools[0], Detail::Full);
        // Only the docstring's own opening and closing quotes are unescaped.
        assert_eq!(
            stub.replace("\\\"\"\"", "").matches("\"\"\"").count(),
            2,
            "{stub}"
        );
    }

    #[test]
    fn long_listings_come_in_pages() {
        let tool = |i: usize| ToolSpec {
            name: format!("t{i}"),
            python_name: String::new(),
            description: String::new(),
            input_schema: serde_json::json!({"type": "object"}),
            output_schema: None,
            annotations: None,
        };
        let catalog = [ServerCatalog {
            server: "s".into(),
            description: String::new(),
            tools: (0..1200).map(tool).collect::<Vec<_>>().into(),
        }];
        let lines = |text: &str| text.lines().filter(|l| l.starts_with("  tools.")).count();
        let first = list(&catalog, &[], Some("s"), 0).unwrap();
        assert_eq!(lines(&first), MAX_LISTED);
        assert!(
            first.contains("… 700 more tools: list_tools(server=\"s\", offset=500)"),
            "{first}"
        );
        let last = list(&catalog, &[], None, 1000).unwrap();
        assert_eq!(lines(&last), 200);
        assert!(
            last.contains("tools.s.t1199") && !last.contains("more tools"),
            "{last}"
        );
        let names: Vec<String> = (0..60).map(|i| format!("s.t{i}")).collect();
        let (text, found) = signatures(&catalog, &names);
        assert_eq!(found, MAX_SIGNATURES);
        assert!(
            text.ends_with("# 10 more names not looked up: at most 50 per call"),
            "{text}"
        );
    }
}
