//! marker — PEP 508 environment markers (`Requires-Dist: six; python_version >= "3.8"`),
//! evaluated for the sandbox's Python (Pyodide 314.0.8), not the host's: which dependencies of a
//! user's wheel (`--wheels`) must be there. wheelhouse/lock.py evaluates the wheelhouse's own with
//! `packaging` against the same environment.

use std::cmp::Ordering;

/// The values a marker sees in the sandbox (lock.py's `PYODIDE_ENV`).
const PYODIDE_ENV: &[(&str, &str)] = &[
    ("implementation_name", "cpython"),
    ("implementation_version", "3.14.2"),
    ("os_name", "posix"),
    ("platform_machine", "wasm32"),
    ("platform_python_implementation", "CPython"),
    ("platform_release", "5.0.3"),
    ("platform_system", "Emscripten"),
    ("platform_version", "#1"),
    ("python_full_version", "3.14.2"),
    ("python_version", "3.14"),
    ("sys_platform", "emscripten"),
    // No extras are asked for: a dependency of an extra is not installed.
    ("extra", ""),
];

/// Whether `marker` holds in the sandbox; an error names what could not be read.
pub fn evaluate(marker: &str) -> Result<bool, String> {
    let tokens = tokenize(marker)?;
    let mut parser = Parser { tokens, at: 0 };
    let value = parser.or()?;
    match parser.tokens.get(parser.at) {
        None => Ok(value),
        Some(token) => Err(format!("unexpected {token:?}")),
    }
}

#[derive(Debug, Clone, PartialEq)]
enum Token {
    Name(String),
    Text(String),
    Op(String),
    Open,
    Close,
}

fn tokenize(marker: &str) -> Result<Vec<Token>, String> {
    let mut tokens = Vec::new();
    let mut chars = marker.char_indices().peekable();
    while let Some(&(at, c)) = chars.peek() {
        match c {
            c if c.is_whitespace() => {
                chars.next();
            }
            '(' | ')' => {
                chars.next();
                tokens.push(if c == '(' { Token::Open } else { Token::Close });
            }
            '"' | '\'' => {
                chars.next();
                let text: String = chars
                    .by_ref()
                    .map(|(_, c)| c)
                    .take_while(|&q| q != c)
                    .collect();
                if !marker[at + 1..].contains(c) {
                    return Err(format!("a string not closed at {}", &marker[at..]));
                }
                tokens.push(Token::Text(text));
            }
            '<' | '>' | '=' | '!' | '~' => {
                let op: String = std::iter::from_fn(|| {
                    chars.next_if(|(_, c)| matches!(c, '<' | '>' | '=' | '!' | '~'))
                })
                .map(|(_, c)| c)
                .collect();
                if !matches!(&*op, "<" | "<=" | "==" | "!=" | ">=" | ">" | "~=" | "===") {
                    return Err(format!("no operator {op:?}"));
                }
                tokens.push(Token::Op(op));
            }
            c if c.is_ascii_alphabetic() || c == '_' => {
                let word: String = std::iter::from_fn(|| {
                    chars.next_if(|(_, c)| c.is_ascii_alphanumeric() || matches!(c, '_' | '.'))
                })
                .map(|(_, c)| c)
                .collect();
                tokens.push(Token::Name(word));
            }
            _ => return Err(format!("unexpected {:?}", &marker[at..])),
        }
    }
    Ok(tokens)
}

struct Parser {
    tokens: Vec<Token>,
    at: usize,
}

impl Parser {
    fn next(&mut self) -> Option<Token> {
        let token = self.tokens.get(self.at).cloned();
        self.at += 1;
        token
    }

    fn word(&self, word: &str) -> bool {
        self.tokens.get(self.at) == Some(&Token::Name(word.to_owned()))
    }

    fn or(&mut self) -> Result<bool, String> {
        let mut value = self.and()?;
        while self.word("or") {
            self.at += 1;
            value |= self.and()?;
        }
        Ok(value)
    }

    fn and(&mut self) -> Result<bool, String> {
        let mut value = self.comparison()?;
        while self.word("and") {
            self.at += 1;
            value &= self.comparison()?;
        }
        Ok(value)
    }

    fn comparison(&mut self) -> Result<bool, String> {
        if self.tokens.get(self.at) == Some(&Token::Open) {
            self.at += 1;
            let value = self.or()?;
            return match self.next() {
                Some(Token::Close) => Ok(value),
                _ => Err("a '(' not closed".into()),
            };
        }
        let left = self.value()?;
        let op = match self.next() {
            Some(Token::Op(op)) => op,
            Some(Token::Name(word)) if word == "in" => word,
            Some(Token::Name(word)) if word == "not" && self.word("in") => {
                self.at += 1;
                "not in".into()
            }
            other => return Err(format!("expected an operator, found {other:?}")),
        };
        let right = self.value()?;
        Ok(compare(&left, &op, &right))
    }

    /// A quoted string, or the value of an environment name.
    fn value(&mut self) -> Result<String, String> {
        match self.next() {
            Some(Token::Text(text)) => Ok(text),
            Some(Token::Name(name)) => PYODIDE_ENV
                .iter()
                .find(|(key, _)| *key == name)
                .map(|(_, value)| (*value).to_owned())
                .ok_or_else(|| format!("no marker variable {name:?}")),
            other => Err(format!("expected a value, found {other:?}")),
        }
    }
}

/// As `packaging` does: versions compare as versions (PEP 440) where both sides are ones,
/// anything else as strings.
fn compare(left: &str, op: &str, right: &str) -> bool {
    match op {
        "in" => return right.contains(left),
        "not in" => return !right.contains(left),
        "===" => return left == right,
        _ => {}
    }
    if let (Some(l), Some(r)) = (release(left), release(right.trim_end_matches(".*"))) {
        let ordering = if right.ends_with(".*") {
            // `== "3.*"`: the release starts with the given parts.
            l.iter().take(r.len()).cmp(r.iter())
        } else {
            cmp_release(&l, &r)
        };
        return match op {
            "<" => ordering == Ordering::Less,
            "<=" => ordering != Ordering::Greater,
            "==" => ordering == Ordering::Equal,
            "!=" => ordering != Ordering::Equal,
            ">=" => ordering != Ordering::Less,
            ">" => ordering == Ordering::Greater,
            // ~= 3.8: >= 3.8 and == 3.*
            "~=" => {
                r.len() >= 2
                    && ordering != Ordering::Less
                    && l.iter().take(r.len() - 1).eq(r.iter().take(r.len() - 1))
            }
            _ => false,
        };
    }
    match op {
        "==" => left == right,
        "!=" => left != right,
        _ => false,
    }
}

/// The numeric release of a version (`3.14.2` -> [3, 14, 2]); None if it is not one.
fn release(version: &str) -> Option<Vec<u64>> {
    version
        .split('.')
        .map(|part| part.parse().ok())
        .collect::<Option<Vec<u64>>>()
        .filter(|parts| !parts.is_empty())
}

/// Releases compare with missing parts as zeros (3.14 == 3.14.0).
fn cmp_release(left: &[u64], right: &[u64]) -> Ordering {
    let len = left.len().max(right.len());
    let part = |v: &[u64], i: usize| v.get(i).copied().unwrap_or(0);
    (0..len)
        .map(|i| part(left, i).cmp(&part(right, i)))
        .find(|o| o.is_ne())
        .unwrap_or(Ordering::Equal)
}

#[cfg(test)]
mod tests {
    use super::evaluate;

    #[test]
    fn markers_hold_for_pyodide_not_the_host() {
        for (marker, want) in [
            (r#"python_version >= "3.8""#, true),
            (r#"python_version < "3.10""#, false),
            (r#"python_version == "3.14""#, true),
            (r#"python_full_version == "3.14.*""#, true),
            (r#"python_full_version == "3.13.*""#, false),
            (r#"python_version ~= "3.10""#, true),
            (r#"python_full_version ~= "3.14.5""#, false),
            (r#"sys_platform == "emscripten""#, true),
            (r#"sys_platform == 'linux'"#, false),
            (
                r#"sys_platform != "win32" and platform_machine == "wasm32""#,
                true,
            ),
            (
                r#"platform_system == "Windows" or platform_system == "Emscripten""#,
                true,
            ),
            (r#"extra == "test""#, false),
            (
                r#"(python_version < "3.11" or sys_platform == "emscripten") and os_name == "posix""#,
                true,
            ),
            (
                r#"python_version < "3.11" or (sys_platform == "linux" and os_name == "posix")"#,
                false,
            ),
            (
                r#"implementation_name == "cpython" and python_version >= "3.9""#,
                true,
            ),
            (r#""wasm" in platform_machine"#, true),
            (r#""x86" not in platform_machine"#, true),
            (r#""3.8" <= python_version"#, true),
        ] {
            assert_eq!(evaluate(marker), Ok(want), "{marker}");
        }
    }

    #[test]
    fn a_marker_that_cannot_be_read_says_why() {
        for (marker, why) in [
            (r#"python_version >= "3.8"#, "not closed"),
            (
                r#"sys_platfrom == "linux""#,
                "no marker variable \"sys_platfrom\"",
            ),
            (r#"python_version >> "3""#, "no operator"),
            (r#"(python_version > "3""#, "not closed"),
            (r#"python_version "3""#, "expected an operator"),
            (r#"python_version > "3" os_name"#, "unexpected"),
        ] {
            let error = evaluate(marker).unwrap_err();
            assert!(error.contains(why), "{marker}: {error}");
        }
    }
}
