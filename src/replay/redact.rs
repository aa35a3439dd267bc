//! What a recording must not hold: the values of the servers' configured `env` and of every
//! `${VAR}` the config expanded (wherever they appear in a string), and the values of the object
//! keys the user names with `--redact KEY` (wherever the key appears in arguments or results).
//!
//! **Invariant:** a secret value never leaves this module except as it came in (to the live
//! server); it is never logged, and only its variable's name reaches a cassette.

use crate::config::{Config, Secret};
use serde_json::{Map, Value};
use std::borrow::Cow;
use std::collections::BTreeSet;

/// What stands where a `--redact` key's value was.
pub const KEY_MARKER: &str = "[redacted]";

/// A secret shorter than this is left alone: a value like `1` or `on` occurs in ordinary text, and
/// replacing it everywhere would garble every result without hiding anything.
pub const MIN_SECRET_CHARS: usize = 4;

/// Replaces secrets and `--redact` keys' values in what is recorded.
#[derive(Debug, Default)]
pub struct Redactor {
    /// (value, marker), longest value first, so a secret that contains another is replaced whole.
    secrets: Vec<(String, String)>,
    /// The `--redact` keys, as given (compared without regard to ASCII case).
    keys: Vec<String>,
}

impl Redactor {
    /// A redactor of `secrets` and of the values of `keys`.
    pub fn new(secrets: impl IntoIterator<Item = Secret>, keys: &[String]) -> Self {
        let mut secrets: Vec<(String, String)> = secrets
            .into_iter()
            .filter(|s| s.value.chars().count() >= MIN_SECRET_CHARS)
            .map(|s| (s.value, format!("[redacted: {}]", s.name)))
            .collect();
        secrets.sort_by(|a, b| b.0.len().cmp(&a.0.len()).then_with(|| a.cmp(b)));
        secrets.dedup_by(|a, b| a.0 == b.0);
        let mut keys: Vec<String> = keys.to_vec();
        keys.sort();
        keys.dedup();
        Self { secrets, keys }
    }

    /// The secrets of every server in `config` (none without one) and the `--redact` keys.
    pub fn for_config(config: Option<&Config>, keys: &[String]) -> Self {
        let secrets = config
            .map(|c| {
                c.servers
                    .iter()
                    .flat_map(|s| s.secrets.clone())
                    .collect::<Vec<Secret>>()
            })
            .unwrap_or_default();
        Self::new(secrets, keys)
    }

    /// Replaces each of `values` (those of at least [`MIN_SECRET_CHARS`]) with [`KEY_MARKER`]:
    /// for values first seen under a `--redact` key, wherever else they turn up.
    pub fn scrubbing(values: impl IntoIterator<Item = String>) -> Self {
        let mut secrets: Vec<(String, String)> = values
            .into_iter()
            .filter(|v| v.chars().count() >= MIN_SECRET_CHARS)
            .map(|v| (v, KEY_MARKER.to_owned()))
            .collect();
        secrets.sort_by(|a, b| b.0.len().cmp(&a.0.len()).then_with(|| a.cmp(b)));
        secrets.dedup_by(|a, b| a.0 == b.0);
        Self {
            secrets,
            keys: Vec::new(),
        }
    }

    /// Whether nothing would be replaced.
    pub fn is_empty(&self) -> bool {
        self.secrets.is_empty() && self.keys.is_empty()
    }

    /// Adds to `found` every string (and number, as written) under a `--redact` key in `value`.
    pub fn collect_key_values(&self, value: &Value, found: &mut BTreeSet<String>) {
        match value {
            _ if self.keys.is_empty() => {}
            Value::Array(items) => items.iter().for_each(|v| self.collect_key_values(v, found)),
            Value::Object(map) => self.collect_key_values_in(map, found),
            _ => {}
        }
    }

    /// [`Redactor::collect_key_values`] of a call's arguments.
    pub fn collect_key_values_in(&self, map: &Map<String, Value>, found: &mut BTreeSet<String>) {
        for (key, value) in map {
            if self.is_redacted_key(key) {
                leaves(value, found);
            } else {
                self.collect_key_values(value, found);
            }
        }
    }

    /// The `--redact` keys, for the cassette's header: a replay redacts a script's arguments the
    /// same way before it compares them with the recorded ones.
    pub fn keys(&self) -> &[String] {
        &self.keys
    }

    /// `text` with every secret replaced by its marker.
    pub fn text<'a>(&self, text: &'a str) -> Cow<'a, str> {
        let mut out = Cow::Borrowed(text);
        for (value, marker) in &self.secrets {
            if out.contains(value.as_str()) {
                out = Cow::Owned(out.replace(value.as_str(), marker));
            }
        }
        out
    }

    /// A copy of `value` with secrets replaced in every string (object keys included) and every
    /// `--redact` key's value replaced by [`KEY_MARKER`].
    pub fn value(&self, value: &Value) -> Value {
        self.walk(value, true)
    }

    /// [`Redactor::value`] for a call's arguments.
    pub fn arguments(&self, arguments: &Map<String, Value>) -> Map<String, Value> {
        self.walk_map(arguments, true)
    }

    /// Secrets only, for what is not the tools' data (the catalogue: a schema property named like
    /// a `--redact` key must stay a schema).
    pub fn secrets_in(&self, value: &Value) -> Value {
        self.walk(value, false)
    }

    /// [`Redactor::secrets_in`] of a call's arguments.
    pub fn secrets_in_map(&self, map: &Map<String, Value>) -> Map<String, Value> {
        self.walk_map(map, false)
    }

    fn walk(&self, value: &Value, keys: bool) -> Value {
        match value {
            Value::String(s) => Value::String(self.text(s).into_owned()),
            Value::Array(items) => Value::Array(items.iter().map(|v| self.walk(v, keys)).collect()),
            Value::Object(map) => Value::Object(self.walk_map(map, keys)),
            other => other.clone(),
        }
    }

    fn walk_map(&self, map: &Map<String, Value>, keys: bool) -> Map<String, Value> {
        map.iter()
            .map(|(key, value)| {
                let value = if keys && self.is_redacted_key(key) {
                    Value::String(KEY_MARKER.to_owned())
                } else {
                    self.walk(value, keys)
                };
                (self.text(key).into_owned(), value)
            })
            .collect()
    }

    fn is_redacted_key(&self, key: &str) -> bool {
        self.keys.iter().any(|k| k.eq_ignore_ascii_case(key))
    }
}

fn leaves(value: &Value, found: &mut BTreeSet<String>) {
    match value {
        Value::String(s) => {
            found.insert(s.clone());
        }
        Value::Number(n) => {
            found.insert(n.to_string());
        }
        Value::Array(items) => items.iter().for_each(|v| leaves(v, found)),
        Value::Object(map) => map.values().for_each(|v| leaves(v, found)),
        Value::Bool(_) | Value::Null => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn secret(name: &str, value: &str) -> Secret {
        Secret {
            name: name.into(),
            value: value.into(),
        }
    }

    #[test]
    fn secrets_are_replaced_everywhere_and_keys_values_wholly() {
        let r = Redactor::new(
            [
                secret("TOKEN", "abc123secret"),
                secret("BEARER", "Bearer abc123secret"),
                secret("DEBUG", "1"),
            ],
            &["password".into()],
        );
        let v = json!({
            "note": "sent Bearer abc123secret, then abc123secret",
            "abc123secret": [1, "x abc123secret"],
            "Password": {"nested": "hunter2"},
            "count": 1,
        });
        assert_eq!(
            r.value(&v),
            json!({
                "note": "sent [redacted: BEARER], then [redacted: TOKEN]",
                "[redacted: TOKEN]": [1, "x [redacted: TOKEN]"],
                "Password": "[redacted]",
                "count": 1,
            })
        );
        // The catalogue keeps its schema keys.
        assert_eq!(
            r.secrets_in(&json!({"password": {"type": "string"}})),
            json!({"password": {"type": "string"}})
        );
        assert!(matches!(r.text("nothing here"), Cow::Borrowed(_)));
        // A value seen under a key is scrubbed wherever else it turns up (echoed in a text).
        let mut found = Default::default();
        r.collect_key_values(&v, &mut found);
        assert_eq!(found.iter().collect::<Vec<_>>(), ["hunter2"]);
        let scrub = Redactor::scrubbing(found);
        assert_eq!(scrub.text("Echo: hunter2!"), "Echo: [redacted]!");
    }
}
