//! How a tool looks from Python: its identifier and a signature built from its JSON Schemas.
//!
//! The one place this is decided. The sandbox receives it with the catalogue (so `help()` shows
//! it) and the server's discovery tools print it, so the model reads exactly what Python accepts.

use super::tools::ToolSpec;
use serde::Serialize;
use serde_json::Value;
use std::collections::HashSet;

const KEYWORDS: &[&str] = &[
    "False", "None", "True", "and", "as", "assert", "async", "await", "break", "class", "continue",
    "def", "del", "elif", "else", "except", "finally", "for", "from", "global", "if", "import",
    "in", "is", "lambda", "nonlocal", "not", "or", "pass", "raise", "return", "try", "while",
    "with", "yield",
];

/// `get-sum` → `get_sum`; `2fa` → `_2fa`; `class` → `class_`. ASCII only: a look-alike letter
/// (Cyrillic `а`) becomes `_`, so no two names that read the same are told apart by it.
pub fn python_name(name: &str) -> String {
    let mut out: String = name
        .chars()
        .take(128)
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' {
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

/// Gives every tool of one server its own Python name: tools whose names map alike (`a.b`,
/// `a_b`; `get-sum`, `get_sum`) keep the plain one for the tool already spelled that way (else
/// the first by MCP name), the others get `_2`, `_3`, ... in MCP-name order, so the mapping is
/// stable however the server orders its list. The docstring shows each MCP name.
pub fn assign_python_names(tools: &mut [ToolSpec]) {
    let mut order: Vec<usize> = (0..tools.len()).collect();
    order.sort_by(|&a, &b| {
        let mapped = |i: usize| python_name(&tools[i].name) != tools[i].name;
        (mapped(a), &tools[a].name).cmp(&(mapped(b), &tools[b].name))
    });
    let mut taken = std::collections::HashSet::new();
    for i in order {
        let base = python_name(&tools[i].name);
        let mut name = base.clone();
        let mut n = 2;
        while !taken.insert(name.clone()) {
            name = format!("{base}_{n}");
            n += 1;
        }
        tools[i].python_name = name;
    }
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Param {
    pub name: String,
    /// The annotation as Python text: `str`, `int | None`, `list[Entity]`.
    pub hint: String,
    pub required: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub default: Option<Value>,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub description: String,
}

/// A named object shape that hints refer to: `Entity = {name: str, observations: list[str]}`.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Shape {
    pub name: String,
    /// `{key: hint, optional?: hint}`, keys in schema order.
    pub fields: String,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Signature {
    pub params: Vec<Param>,
    /// Accepts `**kwargs`: the schema allows keys it does not name, or names some that are not
    /// Python identifiers (`extra_names`).
    pub var_kwargs: bool,
    /// Any key goes (`additionalProperties` allows more, or the schema names no properties).
    pub open: bool,
    /// Property names that are not identifiers, passed as `**{"a-b": 1}`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub extra_names: Vec<String>,
    pub returns: String,
    /// The object shapes the hints name, for the docstring.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub shapes: Vec<Shape>,
}

/// An object schema's `required` names, as a set: a schema may list 100,000 of them.
fn required_names(schema: Option<&serde_json::Map<String, Value>>) -> HashSet<&str> {
    schema
        .and_then(|s| s.get("required"))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect()
}

pub fn signature(spec: &ToolSpec) -> Signature {
    let schema = &spec.input_schema;
    let mut hints = Hints::new(schema);
    let empty = serde_json::Map::new();
    let properties = schema.get("properties").and_then(Value::as_object);
    let required = required_names(schema.as_object());
    let mut params: Vec<Param> = Vec::new();
    let mut extra_names = Vec::new();
    // Required first, as Python requires, each group in schema order.
    for want_required in [true, false] {
        for (name, prop) in properties.unwrap_or(&empty) {
            if required.contains(&name.as_str()) != want_required {
                continue;
            }
            if !is_identifier(name) {
                extra_names.push(name.clone());
                continue;
            }
            let mut hint = hints.hint(prop, 0, name);
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
    let open = properties.is_none()
        || match schema.get("additionalProperties") {
            None | Some(Value::Bool(false)) => false,
            Some(_) => true,
        }
        || schema.get("patternProperties").is_some();
    let returns = match &spec.output_schema {
        Some(output) => Hints::new(output).share(&mut hints, |h| h.hint(output, 0, "result")),
        None => "Any".into(),
    };
    Signature {
        params,
        var_kwargs: open || !extra_names.is_empty(),
        open,
        extra_names,
        returns,
        shapes: hints.shapes,
    }
}

/// A readable Python annotation for a JSON Schema (shapes it would name are written as `dict`).
pub fn type_hint(schema: &Value) -> String {
    Hints::new(schema).hint(schema, 0, "")
}

/// Renders JSON Schemas as Python annotations, naming each object shape once. Bounded: deep,
/// wide or huge schemas degrade to `Any` instead of costing time.
struct Hints<'a> {
    /// The schema `#/$defs/...` references resolve against.
    root: &'a Value,
    shapes: Vec<Shape>,
    /// Names of shapes being rendered (a `$ref` cycle refers to the name).
    open_refs: Vec<String>,
    /// Schema nodes left to look at.
    budget: usize,
}

const MAX_DEPTH: usize = 6;
const MAX_NODES: usize = 2_000;
const MAX_OPTIONS: usize = 12;
const MAX_LITERALS: usize = 8;

impl<'a> Hints<'a> {
    fn new(root: &'a Value) -> Self {
        Self {
            root,
            shapes: Vec::new(),
            open_refs: Vec::new(),
            budget: MAX_NODES,
        }
    }

    /// Runs `f` with this renderer's root, then moves its shapes and budget into `other`.
    fn share(mut self, other: &mut Hints<'_>, f: impl FnOnce(&mut Self) -> String) -> String {
        self.shapes = std::mem::take(&mut other.shapes);
        self.budget = other.budget;
        let hint = f(&mut self);
        other.shapes = self.shapes;
        other.budget = self.budget;
        hint
    }

    /// `context` names what the schema describes (a property name), for naming its shape.
    fn hint(&mut self, schema: &Value, depth: usize, context: &str) -> String {
        if depth > MAX_DEPTH || self.budget == 0 {
            return "Any".into();
        }
        self.budget -= 1;
        let Some(obj) = schema.as_object() else {
            return "Any".into();
        };
        if let Some(reference) = obj.get("$ref").and_then(Value::as_str) {
            return self.reference(reference, depth);
        }
        if let Some(values) = obj.get("enum").and_then(Value::as_array) {
            let mut shown: Vec<String> = values
                .iter()
                .take(MAX_LITERALS)
                .map(python_literal)
                .collect();
            if values.len() > MAX_LITERALS {
                shown.push("...".into());
            }
            return format!("Literal[{}]", shown.join(", "));
        }
        if let Some(v) = obj.get("const") {
            return format!("Literal[{}]", python_literal(v));
        }
        for key in ["anyOf", "oneOf"] {
            if let Some(options) = obj.get(key).and_then(Value::as_array) {
                return self.union(options.iter(), depth, context);
            }
        }
        if let Some([only]) = obj
            .get("allOf")
            .and_then(Value::as_array)
            .map(Vec::as_slice)
        {
            return self.hint(only, depth + 1, context);
        }
        match obj.get("type") {
            Some(Value::Array(kinds)) => {
                let kinds: Vec<String> = kinds
                    .iter()
                    .take(MAX_OPTIONS)
                    .map(|k| self.simple(k.as_str().unwrap_or(""), obj, depth, context))
                    .collect();
                kinds.join(" | ")
            }
            Some(Value::String(kind)) => self.simple(kind, obj, depth, context),
            _ if obj.contains_key("properties") => self.simple("object", obj, depth, context),
            _ => "Any".into(),
        }
    }

    fn union<'v>(
        &mut self,
        options: impl Iterator<Item = &'v Value>,
        depth: usize,
        context: &str,
    ) -> String {
        let mut hints: Vec<String> = Vec::new();
        let mut seen = std::collections::HashSet::new();
        for option in options {
            if hints.len() == MAX_OPTIONS {
                return "Any".into();
            }
            let hint = self.hint(option, depth + 1, context);
            if seen.insert(hint.clone()) {
                hints.push(hint);
            }
        }
        if hints.is_empty() {
            "Any".into()
        } else {
            hints.join(" | ")
        }
    }

    fn simple(
        &mut self,
        kind: &str,
        obj: &serde_json::Map<String, Value>,
        depth: usize,
        context: &str,
    ) -> String {
        match kind {
            "string" => "str".into(),
            "integer" => "int".into(),
            "number" => "float".into(),
            "boolean" => "bool".into(),
            "null" => "None".into(),
            "array" => match obj.get("items") {
                Some(items @ Value::Object(_)) => {
                    format!("list[{}]", self.hint(items, depth + 1, &singular(context)))
                }
                _ => "list".into(),
            },
            "object" => match (obj.get("properties"), obj.get("additionalProperties")) {
                (Some(Value::Object(props)), _) if !props.is_empty() => {
                    self.shape(&pascal_case(context), obj, props, depth)
                }
                (_, Some(extra @ Value::Object(_))) => {
                    format!(
                        "dict[str, {}]",
                        self.hint(extra, depth + 1, &singular(context))
                    )
                }
                _ => "dict".into(),
            },
            _ => "Any".into(),
        }
    }

    /// Names an object shape (`Entity`), records its fields once, and returns the name.
    fn shape(
        &mut self,
        name: &str,
        obj: &serde_json::Map<String, Value>,
        props: &serde_json::Map<String, Value>,
        depth: usize,
    ) -> String {
        let required = required_names(Some(obj));
        let mut fields = Vec::new();
        for (key, prop) in props.iter().take(40) {
            let key_text = if is_identifier(key) {
                key.clone()
            } else {
                Value::from(key.as_str()).to_string()
            };
            let mark = if required.contains(&key.as_str()) {
                ""
            } else {
                "?"
            };
            fields.push(format!(
                "{key_text}{mark}: {}",
                self.hint(prop, depth + 1, key)
            ));
        }
        if props.len() > 40 {
            fields.push(format!("... {} more", props.len() - 40));
        }
        let fields = format!("{{{}}}", fields.join(", "));
        self.name_shape(name, fields)
    }

    fn name_shape(&mut self, name: &str, fields: String) -> String {
        let base = if name.is_empty() { "Item" } else { name };
        let mut candidate = base.to_owned();
        for n in 2.. {
            match self.shapes.iter().find(|s| s.name == candidate) {
                Some(same) if same.fields == fields => return candidate,
                Some(_) => candidate = format!("{base}{n}"),
                None => break,
            }
        }
        self.shapes.push(Shape {
            name: candidate.clone(),
            fields,
        });
        candidate
    }

    /// `#/$defs/Entity` (or `#/definitions/...`): the shape named after the definition.
    fn reference(&mut self, reference: &str, depth: usize) -> String {
        let Some(target) = reference
            .strip_prefix('#')
            .and_then(|pointer| self.root.pointer(pointer))
        else {
            return "Any".into();
        };
        let name = pascal_case(reference.rsplit('/').next().unwrap_or_default());
        if self.open_refs.contains(&name) {
            return name;
        }
        self.open_refs.push(name.clone());
        let hint = match target.as_object() {
            Some(obj)
                if obj
                    .get("properties")
                    .is_some_and(|p| p.as_object().is_some_and(|p| !p.is_empty())) =>
            {
                let props = obj["properties"].as_object().expect("checked above");
                // Inside, a reference back to this definition is just its name (see above).
                self.shape(&name, obj, props, depth)
            }
            _ => self.hint(target, depth + 1, &name),
        };
        self.open_refs.pop();
        hint
    }
}

/// `entities` → `entities`' item context `entity`; `edits` → `edit`.
fn singular(word: &str) -> String {
    if let Some(stem) = word.strip_suffix("ies") {
        format!("{stem}y")
    } else if word.ends_with("sses") || word.ends_with("xes") {
        word[..word.len() - 2].to_owned()
    } else if word.ends_with('s') && !word.ends_with("ss") && word.len() > 1 {
        word[..word.len() - 1].to_owned()
    } else if word.is_empty() {
        String::new()
    } else {
        format!("{word}Item")
    }
}

/// `entity_type` / `entity-type` / `entityType` → `EntityType`.
fn pascal_case(word: &str) -> String {
    let mut out = String::new();
    let mut upper = true;
    for c in word.chars() {
        if c.is_alphanumeric() {
            if upper {
                out.extend(c.to_uppercase());
            } else {
                out.push(c);
            }
            upper = false;
        } else {
            upper = true;
        }
    }
    if out.starts_with(|c: char| c.is_ascii_digit()) {
        out.insert(0, '_');
    }
    out
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
    if spec.py_name() != spec.name {
        // Quoted and escaped: a name can hold anything, and this text reaches the model.
        doc.push_str(&format!("\n\nMCP name: {:?}", spec.name));
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
    if !sig.extra_names.is_empty() {
        let names: Vec<String> = sig
            .extra_names
            .iter()
            .map(|n| Value::from(n.as_str()).to_string())
            .collect();
        doc.push_str(&format!(
            "\n\nAlso takes (as **{{\"name\": value}}): {}",
            names.join(", ")
        ));
    }
    if !sig.shapes.is_empty() {
        doc.push_str("\n\nShapes (key?: optional):");
        for shape in &sig.shapes {
            doc.push_str(&format!("\n    {} = {}", shape.name, shape.fields));
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn spec(input: Value, output: Option<Value>) -> ToolSpec {
        ToolSpec {
            name: "read-file".into(),
            python_name: String::new(),
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

    #[test]
    fn nested_shapes_are_named_and_shown() {
        // server-memory's create_entities, as its zod schema lists it.
        let s = spec(
            json!({"type": "object", "properties": {"entities": {"type": "array", "items": {
                "type": "object", "properties": {"name": {"type": "string"}, "entityType": {"type": "string"},
                "observations": {"type": "array", "items": {"type": "string"}}},
                "required": ["name", "entityType", "observations"]}}}, "required": ["entities"]}),
            None,
        );
        let sig = signature(&s);
        assert_eq!(
            sig.render("create_entities"),
            "create_entities(*, entities: list[Entity]) -> Any"
        );
        assert!(
            !sig.var_kwargs,
            "a schema that names its properties takes no others"
        );
        assert!(docstring(&s, &sig)
            .contains("Entity = {name: str, entityType: str, observations: list[str]}"));
        // pydantic-style $defs, with a recursive reference and an optional field.
        let s = spec(
            json!({"type": "object", "$defs": {"Node": {"type": "object", "properties": {
                "label": {"type": "string"}, "children": {"type": "array", "items": {"$ref": "#/$defs/Node"}}},
                "required": ["label"]}}, "properties": {"root": {"$ref": "#/$defs/Node"},
                "mode": {"enum": ["fast", "slow"]}}, "required": ["root"], "additionalProperties": true}),
            None,
        );
        let sig = signature(&s);
        assert_eq!(
            sig.render("walk"),
            "walk(*, root: Node, mode: Literal[\"fast\", \"slow\"] | None = None, **kwargs) -> Any"
        );
        assert_eq!(sig.shapes[0].fields, "{label: str, children?: list[Node]}");
    }

    #[test]
    fn huge_schemas_render_quickly_and_bounded() {
        let options: Vec<Value> = (0..200_000).map(|i| json!({"const": i})).collect();
        let wide = spec(
            json!({"type": "object", "properties": {"x": {"anyOf": options}}, "required": ["x"]}),
            None,
        );
        assert_eq!(signature(&wide).render("f"), "f(*, x: Any) -> Any");
        let names: Vec<String> = (0..100_000).map(|i| format!("p{i}")).collect();
        let props: serde_json::Map<String, Value> = names
            .iter()
            .map(|n| (n.clone(), json!({"type": "string"})))
            .collect();
        let many = spec(
            json!({"type": "object", "properties": props, "required": names}),
            None,
        );
        // Linear: a list scan per property made this 10^10 steps.
        let sig = signature(&many);
        assert_eq!(sig.params.len(), 100_000);
        assert!(sig.params.iter().all(|p| p.required));
        let mut deep = json!({"type": "string"});
        for _ in 0..120 {
            // serde_json parses at most 128 levels: the deepest a server can send.
            deep = json!({"type": "array", "items": deep});
        }
        let deep = spec(json!({"type": "object", "properties": {"x": deep}}), None);
        assert!(signature(&deep).render("g").len() < 200);
    }
}
