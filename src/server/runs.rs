//! What an execution leaves to read later, as MCP resources: the files its script wrote under
//! `/output/`, and the whole of a stdout, stderr or result too large to show inline.
//!
//! URIs are `mcp-code-mode://runs/<execution_id>/<name>` (`stdout`, `stderr`, `result`,
//! `output/<path>`), read in pages of [`PAGE_BYTES`] with `?page=N` (1 when left out). A run is
//! kept until it is older than the keep time or the runs kept pass the keep size, oldest first;
//! a read of an evicted one says so. Each run belongs to the client session that made it: any
//! other session reading it gets the same "not found" as for a run that never was.

use base64::Engine as _;
use parking_lot::Mutex;
use rmcp::model::{MetaObject, ReadResourceResult, Resource, ResourceContents, ResourceTemplate};
use rmcp::ErrorData as McpError;
use serde_json::Value;
use std::collections::VecDeque;
use std::time::{Duration, Instant};

pub const URI_PREFIX: &str = "mcp-code-mode://runs/";
/// What one `resources/read` returns of a large resource.
/// Small enough that a page, JSON-escaped in its response, fits the 1 MiB a client such as
/// the Python SDK accepts in one server-sent event.
pub const PAGE_BYTES: usize = 256 << 10;
/// How many evicted runs are remembered, to say "evicted" rather than "not found".
const EVICTED_REMEMBERED: usize = 4096;

/// Who made a run: one client session (stdio has one; each HTTP session its own).
pub type Owner = u64;

/// One readable thing of a run.
pub struct Entry {
    /// `stdout`, `stderr`, `result` or `output/<path>`.
    pub name: String,
    pub mime_type: String,
    pub bytes: Vec<u8>,
}

impl Entry {
    /// A text resource is served as text; any other, or text that is not UTF-8, as a blob.
    fn is_text(&self) -> bool {
        is_text_mime(&self.mime_type) && std::str::from_utf8(&self.bytes).is_ok()
    }

    fn pages(&self) -> usize {
        self.bytes.len().div_ceil(PAGE_BYTES).max(1)
    }
}

pub fn is_text_mime(mime: &str) -> bool {
    mime.starts_with("text/")
        || mime.ends_with("+json")
        || mime.ends_with("+xml")
        || matches!(
            mime,
            "application/json" | "application/xml" | "application/javascript" | "image/svg+xml"
        )
}

/// The MIME type a file's name suggests (`application/octet-stream` when it suggests none).
pub fn mime_for(path: &str) -> String {
    mime_guess::from_path(path)
        .first_raw()
        .unwrap_or("application/octet-stream")
        .to_owned()
}

struct Run {
    id: String,
    owner: Owner,
    made: Instant,
    entries: Vec<Entry>,
    bytes: usize,
}

/// How long runs are kept, and how much of them.
#[derive(Debug, Clone, Copy)]
pub struct Keep {
    pub time: Duration,
    pub bytes: usize,
}

pub struct RunStore {
    keep: Keep,
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    /// Oldest first.
    runs: VecDeque<Run>,
    bytes: usize,
    evicted: VecDeque<(String, Owner)>,
}

impl RunStore {
    pub fn new(keep: Keep) -> Self {
        Self {
            keep,
            inner: Mutex::default(),
        }
    }

    /// Keeps a run's entries (none: nothing is kept), evicting the oldest runs past the budget.
    pub fn add(&self, id: &str, owner: Owner, entries: Vec<Entry>) {
        if entries.is_empty() {
            return;
        }
        let bytes = entries.iter().map(|e| e.bytes.len()).sum();
        let mut inner = self.inner.lock();
        inner.runs.push_back(Run {
            id: id.to_owned(),
            owner,
            made: Instant::now(),
            entries,
            bytes,
        });
        inner.bytes += bytes;
        self.evict(&mut inner);
    }

    fn evict(&self, inner: &mut Inner) {
        let now = Instant::now();
        while let Some(oldest) = inner.runs.front() {
            let expired = now.duration_since(oldest.made) > self.keep.time;
            if !expired && inner.bytes <= self.keep.bytes {
                break;
            }
            let run = inner.runs.pop_front().expect("a front run");
            inner.bytes -= run.bytes;
            tracing::debug!("run {}: evicted ({} bytes)", run.id, run.bytes);
            inner.evicted.push_back((run.id, run.owner));
            if inner.evicted.len() > EVICTED_REMEMBERED {
                inner.evicted.pop_front();
            }
        }
    }

    /// Every resource `owner` may read, newest run first.
    pub fn list(&self, owner: Owner) -> Vec<Resource> {
        let mut inner = self.inner.lock();
        self.evict(&mut inner);
        inner
            .runs
            .iter()
            .rev()
            .filter(|run| run.owner == owner)
            .flat_map(|run| {
                run.entries.iter().map(|entry| {
                    let pages = entry.pages();
                    let description = if pages > 1 {
                        format!(
                            "execution {}: {} ({} bytes, {pages} pages of {PAGE_BYTES} bytes: add ?page=1 to ?page={pages})",
                            run.id, entry.name, entry.bytes.len()
                        )
                    } else {
                        format!("execution {}: {}", run.id, entry.name)
                    };
                    Resource::new(uri(&run.id, &entry.name), format!("{}/{}", run.id, entry.name))
                        .with_mime_type(entry.mime_type.clone())
                        .with_size(entry.bytes.len() as u64)
                        .with_description(description)
                })
            })
            .collect()
    }

    /// One page of a resource, for `owner`.
    pub fn read(&self, requested: &str, owner: Owner) -> Result<ReadResourceResult, McpError> {
        let (id, name, page) = parse_uri(requested)?;
        let mut inner = self.inner.lock();
        self.evict(&mut inner);
        let not_found = || {
            McpError::resource_not_found(
                format!("no resource {requested}: this session made no such run"),
                None,
            )
        };
        let Some(run) = inner
            .runs
            .iter()
            .find(|run| run.id == id && run.owner == owner)
        else {
            if inner.evicted.iter().any(|(e, o)| *e == id && *o == owner) {
                return Err(McpError::resource_not_found(
                    format!(
                        "{requested} is no longer kept: execution {id} was evicted (runs are kept for {} s and {} MiB in all, oldest evicted first: --keep-runs-s, --keep-runs-mb)",
                        self.keep.time.as_secs(),
                        self.keep.bytes >> 20
                    ),
                    None,
                ));
            }
            return Err(not_found());
        };
        let Some(entry) = run.entries.iter().find(|e| e.name == name) else {
            let names: Vec<&str> = run.entries.iter().map(|e| e.name.as_str()).collect();
            return Err(McpError::resource_not_found(
                format!("execution {id} has no {name}; it has: {}", names.join(", ")),
                None,
            ));
        };
        let pages = entry.pages();
        if page == 0 || page > pages {
            return Err(McpError::invalid_params(
                format!("{requested}: no page {page}; it has pages 1 to {pages}"),
                None,
            ));
        }
        let start = (page - 1) * PAGE_BYTES;
        let end = (start + PAGE_BYTES).min(entry.bytes.len());
        let shown = uri(&run.id, &entry.name);
        let shown = if pages > 1 {
            format!("{shown}?page={page}")
        } else {
            shown
        };
        let mut meta = MetaObject::new();
        meta.insert("page".into(), page.into());
        meta.insert("pages".into(), pages.into());
        meta.insert("bytes".into(), entry.bytes.len().into());
        let contents = if entry.is_text() {
            let text = std::str::from_utf8(&entry.bytes).expect("checked by is_text");
            // A page starts and ends on character boundaries: a character cut by one page's end
            // is all on the next.
            let (start, end) = (
                text.floor_char_boundary(start),
                text.floor_char_boundary(end),
            );
            let end = if page == pages { text.len() } else { end };
            ResourceContents::TextResourceContents {
                uri: shown,
                mime_type: Some(entry.mime_type.clone()),
                text: text[start..end].to_owned(),
                meta: Some(meta),
            }
        } else {
            ResourceContents::BlobResourceContents {
                uri: shown,
                mime_type: Some(entry.mime_type.clone()),
                blob: base64::engine::general_purpose::STANDARD.encode(&entry.bytes[start..end]),
                meta: Some(meta),
            }
        };
        Ok(ReadResourceResult::new(vec![contents]))
    }
}

/// The template a client fills to read a page of any run's resource.
pub fn template() -> ResourceTemplate {
    ResourceTemplate::new(
        format!("{URI_PREFIX}{{execution_id}}/{{+name}}{{?page}}"),
        "execution output",
    )
    .with_description(format!(
        "What an execute_code call left: name is stdout, stderr, result (JSON) or output/<path> (a file the script wrote under /output/). Read in pages of {PAGE_BYTES} bytes, page=1 first; each read's _meta says page, pages and bytes."
    ))
}

/// The URI of a run's entry (an output path percent-encoded, its slashes kept).
pub fn uri(id: &str, name: &str) -> String {
    use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
    const KEPT: &AsciiSet = &NON_ALPHANUMERIC
        .remove(b'/')
        .remove(b'-')
        .remove(b'_')
        .remove(b'.')
        .remove(b'~');
    format!("{URI_PREFIX}{id}/{}", utf8_percent_encode(name, KEPT))
}

/// (execution id, entry name, page) of one of our URIs.
fn parse_uri(requested: &str) -> Result<(String, String, usize), McpError> {
    let bad = |why: &str| {
        McpError::invalid_params(
            format!(
                "{requested:.300}: {why} (expected {URI_PREFIX}<execution_id>/<name>[?page=N])"
            ),
            None,
        )
    };
    let rest = requested
        .strip_prefix(URI_PREFIX)
        .ok_or_else(|| bad("not a resource of this server"))?;
    let (path, query) = match rest.split_once('?') {
        Some((path, query)) => (path, Some(query)),
        None => (rest, None),
    };
    let page = match query {
        None => 1,
        Some(query) => query
            .strip_prefix("page=")
            .and_then(|n| n.parse::<usize>().ok())
            .ok_or_else(|| bad("the only query is page=N, N from 1"))?,
    };
    let (id, name) = path
        .split_once('/')
        .ok_or_else(|| bad("no resource name"))?;
    let name = percent_encoding::percent_decode_str(name)
        .decode_utf8()
        .map_err(|_| bad("the name is not UTF-8"))?;
    Ok((id.to_owned(), name.into_owned(), page))
}

/// The start of `text`, at most `budget` bytes, cut after a whole line when one ends in its
/// second half, else at a character boundary.
pub fn cut_text(text: &str, budget: usize) -> &str {
    if text.len() <= budget {
        return text;
    }
    let end = text.floor_char_boundary(budget);
    match text[..end].rfind('\n') {
        Some(nl) if nl + 1 >= end / 2 => &text[..nl + 1],
        _ => &text[..end],
    }
}

/// Nesting deeper than this is summarized in a shrunk result.
pub const MAX_DEPTH: usize = 8;

/// `value` cut to roughly `budget` bytes of JSON, keeping its shape: a list keeps its first items
/// and ends with a `"… N more items"` string, an object its first keys and a `"…"` key saying
/// how many more, long strings end with `… (N more bytes)`, and lists or objects nested deeper
/// than [`MAX_DEPTH`] become a string saying what they held.
pub fn shrink(value: &Value, budget: usize) -> Value {
    shrink_at(value, budget.max(64), 0)
}

fn json_len(value: &Value) -> usize {
    serde_json::to_string(value).map_or(0, |s| s.len())
}

fn shrink_at(value: &Value, budget: usize, depth: usize) -> Value {
    match value {
        Value::String(s) if s.len() + 2 > budget => {
            let keep = s.floor_char_boundary(budget.saturating_sub(40).max(8));
            Value::String(format!("{}… ({} more bytes)", &s[..keep], s.len() - keep))
        }
        Value::Array(items) if depth >= MAX_DEPTH && !items.is_empty() => Value::String(format!(
            "[a list of {} items, nested too deep to show]",
            items.len()
        )),
        Value::Object(map) if depth >= MAX_DEPTH && !map.is_empty() => Value::String(format!(
            "{{an object of {} keys, nested too deep to show}}",
            map.len()
        )),
        Value::Array(items) => {
            // Each item may take a quarter of the budget, so a few big ones do not crowd out
            // every other; what does not fit is counted.
            let share = (budget / 4).max(64);
            let mut kept = Vec::new();
            let mut used = 2;
            for item in items {
                let small = shrink_at(item, share.min(budget.saturating_sub(used)), depth + 1);
                let len = json_len(&small) + 1;
                if used + len + 32 > budget {
                    break;
                }
                used += len;
                kept.push(small);
            }
            if kept.len() < items.len() {
                kept.push(Value::String(format!(
                    "… {} more items",
                    items.len() - kept.len()
                )));
            }
            Value::Array(kept)
        }
        Value::Object(map) => {
            let share = (budget / 4).max(64);
            let mut kept = serde_json::Map::new();
            let mut used = 2;
            for (key, item) in map {
                let small = shrink_at(item, share.min(budget.saturating_sub(used)), depth + 1);
                let len = json_len(&small) + key.len() + 4;
                if used + len + 32 > budget {
                    break;
                }
                used += len;
                kept.insert(key.clone(), small);
            }
            if kept.len() < map.len() {
                kept.insert(
                    "…".into(),
                    Value::String(format!("{} more keys", map.len() - kept.len())),
                );
            }
            Value::Object(kept)
        }
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_shrunk_value_keeps_its_shape_within_its_budget() {
        // Keys are kept in order until one does not fit (serde_json keeps insertion order here).
        let big = json!({
            "deep": [[[[[[[[[[1]]]]]]]]]],
            "note": "x".repeat(100_000),
            "rows": (0..100_000).map(|i| json!({"id": i, "name": format!("row {i}")})).collect::<Vec<_>>(),
        });
        let small = shrink(&big, 4096);
        let text = small.to_string();
        assert!(text.len() < 6000, "{} bytes", text.len());
        let rows = small["rows"].as_array().unwrap();
        assert_eq!(rows[0], json!({"id": 0, "name": "row 0"}));
        assert!(
            rows.last()
                .unwrap()
                .as_str()
                .unwrap()
                .ends_with("more items"),
            "{text}"
        );
        assert!(
            small["note"].as_str().unwrap().ends_with("more bytes)"),
            "{text}"
        );
        // Deep nesting ends at MAX_DEPTH at the latest (a summary string, or a count of what
        // the shrinking budget left out).
        fn depth(v: &Value) -> usize {
            match v {
                Value::Array(a) => 1 + a.iter().map(depth).max().unwrap_or(0),
                Value::Object(o) => 1 + o.values().map(depth).max().unwrap_or(0),
                _ => 0,
            }
        }
        assert!(depth(&small) <= MAX_DEPTH, "{text}");
    }

    #[test]
    fn text_is_cut_after_a_line() {
        let text = "line one\nline two\nline three\n";
        assert_eq!(cut_text(text, 22), "line one\nline two\n");
        assert_eq!(cut_text(text, 100), text);
        assert_eq!(cut_text("ééé", 3), "é");
    }

    #[test]
    fn uris_round_trip_and_page() {
        let u = uri("20261205-1-ab", "output/my report?.csv");
        assert_eq!(
            u,
            "mcp-code-mode://runs/20261205-1-ab/output/my%20report%3F.csv"
        );
        let (id, name, page) = parse_uri(&format!("{u}?page=3")).unwrap();
        assert_eq!(
            (id.as_str(), name.as_str(), page),
            ("20261205-1-ab", "output/my report?.csv", 3)
        );
        assert!(parse_uri("file:///etc/passwd").is_err());
        assert!(parse_uri(&format!("{u}?page=x")).is_err());
    }

    #[test]
    fn runs_are_evicted_oldest_first_and_kept_from_other_sessions() {
        let store = RunStore::new(Keep {
            time: Duration::from_secs(60),
            bytes: 10,
        });
        let entry = |n: usize| Entry {
            name: "stdout".into(),
            mime_type: "text/plain".into(),
            bytes: vec![b'a'; n],
        };
        store.add("one", 1, vec![entry(6)]);
        store.add("two", 1, vec![entry(6)]);
        let evicted = store.read(&uri("one", "stdout"), 1).unwrap_err();
        assert!(evicted.message.contains("evicted"), "{}", evicted.message);
        assert!(store.read(&uri("two", "stdout"), 1).is_ok());
        let other = store.read(&uri("two", "stdout"), 2).unwrap_err();
        let never = store.read(&uri("three", "stdout"), 2).unwrap_err();
        assert_eq!(
            other.message.replace("two", "three"),
            never.message,
            "another session learns nothing"
        );
        assert!(store
            .read(&uri("one", "stdout"), 2)
            .unwrap_err()
            .message
            .contains("no resource"));
        assert_eq!(store.list(1).len(), 1);
        assert!(store.list(2).is_empty());
    }
}
