//! How a tool looks from Python: its identifier and a signature built from its JSON Schemas.
//!
//! The one place this is decided. The sandbox receives it with the catalogue (so `help()` shows
//! it) and the server's discovery tools print it, so the model reads exactly what Python accepts.

use super::tools::ToolSpec;
use serde::Serialize;
use serde_json::Value;

const KEYWORDS: &[&str] = &[
    "False", "None", "True", "and", "as", "assert", "async", "await", "break", "class", "continue",
    "def", "del", "elif", "else", "except", "finally", "for", "from", "global", "if", "import",
    "in", "is", "lambda", "nonlocal", "not", "or", "pass", "raise", "return", "try", "while",
    "with", "yield",
];

/// `get-sum` → `get_sum`; `2fa` → `_2fa`; `class` → `class_`.
pub fn python_name(name: &str) -> String {
    let mut out: String = name
        .chars()
        .map(|c| {
            if c.is_alphanumeric() || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if out.is_empty() || out.starts_with(|c: char| c.is_ascii_digit()) {
        out.insert(0, '_');
    }
    if KEYWORDS.contains(&out.as_str()) {
        out.push('_');
    }
    out
}

fn is_identifier(name: &str) -> bool {
    python_name(name) == name
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Param {
    pub name: String,
    /// The annotation as Python text: `str`, `int | None`, `list[str]`.
    pub hint: String,
    pub required: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub default: Option<Value>,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub description: String,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Signature {
    pub params: Vec<Param>,
    /// Accepts `**kwargs` (schema allows more properties, or some have non-identifier names).
    pub var_kwargs: bool,
    pub returns: String,
}

pub fn signature(spec: &ToolSpec) -> Signature {
    let schema = &spec.input_schema;
    let empty = serde_json::Map::new();
    let properties = schema
        .get("properties")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    let required: Vec<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    let mut params: Vec<Param> = Vec::new();
    let mut hidden = false;
    // Required first, as Python requires, each group in schema order.
    for want_required in [true, false] {
        for (name, prop) in properties {
            if required.contains(&name.as_str()) != want_required {
                continue;
            }
            if !is_identifier(name) {
                hidden = true;
                continue;
            }
            let mut hint = type_hint(prop, 0);
            let default = prop.get("default").cloned();
            if !want_required && default.is_none() && !hint.split(" | ").any(|h| h == "None") {
                hint.push_str(" | None");
            }
            params.push(Param {
                name: name.clone(),
                hint,
                required: want_required,
                default,
                description: prop
                    .get("description")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned(),
            });
        }
    }
    let closed = schema.get("additionalProperties") == Some(&Value::Bool(false));
    let returns = spec
        .output_schema
        .as_ref()
        .map(|s| type_hint(s, 0))
        .unwrap_or_else(|| "Any".into());
    Signature {
        params,
        var_kwargs: hidden || !closed,
        returns,
    }
}

/// A readable Python annotation for a JSON Schema.
pub fn type_hint(schema: &Value, depth: usize) -> String {
    if depth > 3 {
        return "Any".into();
    }
    let Some(obj) = schema.as_object() else {
        return "Any".into();
    };
    if let Some(values) = obj.get("enum").and_then(Value::as_array) {
        let shown: Vec<String> = values.iter().take(8).map(Value::to_string).collect();
        return format!("Literal[{}]", shown.join(", "));
    }
    if let Some(v) = obj.get("const") {
        return format!("Literal[{v}]");
    }
    for key in ["anyOf", "oneOf"] {
        if let Some(options) = obj.get(key).and_then(Value::as_array) {
            let mut hints: Vec<String> = Vec::new();
            for h in options.iter().map(|o| type_hint(o, depth + 1)) {
                if !hints.contains(&h) {
                    hints.push(h);
                }
            }
            return hints.join(" | ");
        }
    }
    match obj.get("type") {
        Some(Value::Array(kinds)) => kinds
            .iter()
            .map(|k| simple_type(k.as_str().unwrap_or(""), obj, depth))
            .collect::<Vec<_>>()
            .join(" | "),
        Some(Value::String(kind)) => simple_type(kind, obj, depth),
        _ if obj.contains_key("properties") => "dict".into(),
        _ => "Any".into(),
    }
}

fn simple_type(kind: &str, obj: &serde_json::Map<String, Value>, depth: usize) -> String {
    match kind {
        "string" => "str".into(),
        "integer" => "int".into(),
        "number" => "float".into(),
        "boolean" => "bool".into(),
        "null" => "None".into(),
        "array" => match obj.get("items") {
            Some(items) => format!("list[{}]", type_hint(items, depth + 1)),
            None => "list".into(),
        },
        "object" => match obj.get("additionalProperties") {
            Some(extra @ Value::Object(_)) => format!("dict[str, {}]", type_hint(extra, depth + 1)),
            _ => "dict".into(),
        },
        _ => "Any".into(),
    }
}

impl Signature {
    /// `read_text_file(*, path: str, head: int | None = None) -> dict`
    pub fn render(&self, name: &str) -> String {
        let mut parts: Vec<String> = Vec::new();
        if !self.params.is_empty() {
            parts.push("*".into());
        }
        for p in &self.params {
            match (&p.default, p.required) {
                (_, true) => parts.push(format!("{}: {}", p.name, p.hint)),
                (Some(d), false) => {
                    parts.push(format!("{}: {} = {}", p.name, p.hint, python_literal(d)))
                }
                (None, false) => parts.push(format!("{}: {} = None", p.name, p.hint)),
            }
        }
        if self.var_kwargs {
            parts.push("**kwargs".into());
        }
        format!("{name}({}) -> {}", parts.join(", "), self.returns)
    }
}

/// A JSON value written as Python would write it.
pub fn python_literal(v: &Value) -> String {
    match v {
        Value::Null => "None".into(),
        Value::Bool(true) => "True".into(),
        Value::Bool(false) => "False".into(),
        Value::Array(items) => format!(
            "[{}]",
            items
                .iter()
                .map(python_literal)
                .collect::<Vec<_>>()
                .join(", ")
        ),
        Value::Object(map) => format!(
            "{{{}}}",
            map.iter()
                .map(|(k, v)| format!("{}: {}", Value::from(k.as_str()), python_literal(v)))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        other => other.to_string(),
    }
}

/// The tool's docstring: description, MCP name when it differs, argument notes, hints.
pub fn docstring(spec: &ToolSpec, sig: &Signature) -> String {
    let mut doc = if spec.description.trim().is_empty() {
        format!("Tool '{}'.", spec.name)
    } else {
        spec.description.trim().to_owned()
    };
    if python_name(&spec.name) != spec.name {
        doc.push_str(&format!("\n\nMCP name: {}", spec.name));
    }
    let described: Vec<&Param> = sig
        .params
        .iter()
        .filter(|p| !p.description.is_empty())
        .collect();
    if !described.is_empty() {
        doc.push_str("\n\nArguments:");
        for p in described {
            doc.push_str(&format!("\n    {}: {}", p.name, p.description));
        }
    }
    if let Some(Value::Object(ann)) = &spec.annotations {
        let hints: Vec<&str> = [
            "readOnlyHint",
            "destructiveHint",
            "idempotentHint",
            "openWorldHint",
        ]
        .into_iter()
        .filter(|k| ann.get(*k) == Some(&Value::Bool(true)))
        .collect();
        if !hints.is_empty() {
            doc.push_str(&format!("\n\nHints: {}", hints.join(", ")));
        }
    }
    doc
}

/// The catalogue as the sandbox's Python receives it: names, signatures and docstrings decided here.
pub fn python_view(
    catalog: &[super::tools::ServerCatalog],
    unavailable: &[(String, String)],
) -> Value {
    let down = unavailable.iter().map(|(server, why)| {
        serde_json::json!({
            "server": server,
            "pythonName": python_name(server),
            "description": "",
            "tools": [],
            "unavailable": why,
        })
    });
    let servers: Vec<Value> = catalog
        .iter()
        .map(|server| {
            let tools: Vec<Value> = server
                .tools
                .iter()
                .map(|tool| {
                    let sig = signature(tool);
                    serde_json::json!({
                        "name": tool.name,
                        "pythonName": python_name(&tool.name),
                        "doc": docstring(tool, &sig),
                        "signature": sig,
                    })
                })
                .collect();
            serde_json::json!({
                "server": server.server,
                "pythonName": python_name(&server.server),
                "description": server.description,
                "tools": tools,
            })
        })
        .chain(down)
        .collect();
    Value::Array(servers)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn spec(input: Value, output: Option<Value>) -> ToolSpec {
        ToolSpec {
            name: "read-file".into(),
            description: "Reads.".into(),
            input_schema: input,
            output_schema: output,
            annotations: None,
        }
    }

    #[test]
    fn names_become_identifiers() {
        assert_eq!(python_name("get-sum"), "get_sum");
        assert_eq!(python_name("2fa"), "_2fa");
        assert_eq!(python_name("class"), "class_");
        assert_eq!(python_name("a.b"), "a_b");
    }

    #[test]
    fn signatures_read_like_python() {
        let s = spec(
            json!({"type": "object", "additionalProperties": false,
                "properties": {"head": {"type": "integer"}, "path": {"type": "string"},
                    "mode": {"enum": ["r", "w"], "default": "r"}, "tags": {"type": "array", "items": {"type": "string"}}},
                "required": ["path"]}),
            Some(json!({"type": "object"})),
        );
        assert_eq!(
            signature(&s).render("read_file"),
            "read_file(*, path: str, head: int | None = None, mode: Literal[\"r\", \"w\"] = 'r', tags: list[str] | None = None) -> dict"
                .replace("'r'", "\"r\"")
        );
        let open = spec(
            json!({"type": "object", "properties": {"a-b": {"type": "string"}}}),
            None,
        );
        assert_eq!(signature(&open).render("f"), "f(**kwargs) -> Any");
    }
}
