//! Comparing what one script did in the two hosts, byte for byte, and naming what differs.
//!
//! Every field is compared exactly: stdout, stderr, the result, and the error's type, message and
//! traceback. A difference is never hidden; when every differing line is explained by something
//! the two hosts cannot share (the browser's user agent, its UI language, the wall clock), the
//! verdict names that cause instead of a bare "different". Either way it counts as a difference.

use super::HostOutcome;
use regex::Regex;
use std::sync::OnceLock;

/// What the browser told us about itself, to recognise its fingerprints in a script's output.
#[derive(Debug, Clone, Default)]
pub struct BrowserFacts {
    /// `navigator.userAgent`, which Emscripten reports as `sys._emscripten_info.runtime`.
    pub user_agent: String,
    /// `navigator.language`, which Emscripten turns into `LANG` (`en-US` -> `en_US.UTF-8`).
    pub language: String,
}

/// A cause of difference that no amount of care in the hosts can remove.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Inherent {
    /// `sys._emscripten_info.runtime`: the V8 host has no navigator, so Emscripten says UNKNOWN.
    UserAgent,
    /// `LANG` and the locale Python derives from it: `C.UTF-8` in V8, the UI language in Chromium.
    Locale,
    /// Time zone names: Chromium's Intl names `UTC`, V8 without ICU data says `UTC-0000`.
    TimeZoneName,
    /// Dates, times and epoch seconds read from the clock, which moves between the two runs.
    WallClock,
}

impl Inherent {
    pub fn name(self) -> &'static str {
        match self {
            Inherent::UserAgent => "user agent",
            Inherent::Locale => "locale (LANG)",
            Inherent::TimeZoneName => "time zone name",
            Inherent::WallClock => "wall clock",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Same,
    /// Differs only in ways these causes explain.
    Inherent(Vec<Inherent>),
    Different,
}

impl Verdict {
    pub fn label(&self) -> String {
        match self {
            Verdict::Same => "same".into(),
            Verdict::Different => "DIFFERENT".into(),
            Verdict::Inherent(causes) => format!(
                "inherent: {}",
                causes
                    .iter()
                    .map(|c| c.name())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        }
    }
}

/// The first differing line of one field.
#[derive(Debug, Clone, PartialEq)]
pub struct FieldDiff {
    pub field: &'static str,
    /// 1-based.
    pub line: usize,
    pub v8: Option<String>,
    pub browser: Option<String>,
    /// The causes that explain every differing line of this field, or None if something does not.
    pub explained: Option<Vec<Inherent>>,
}

impl FieldDiff {
    /// `stdout line 3: V8 "a" | Chromium "b"`, for the table.
    pub fn summary(&self, width: usize) -> String {
        let show = |s: &Option<String>| match s {
            Some(s) => format!("{:?}", clip(s.trim_end_matches('\n'), width)),
            None => "(no line)".into(),
        };
        format!(
            "{} line {}: V8 {} | Chromium {}",
            self.field,
            self.line,
            show(&self.v8),
            show(&self.browser)
        )
    }
}

/// At most `width` characters, the ellipsis included (a column of the diff).
fn clip(s: &str, width: usize) -> String {
    if s.chars().count() <= width {
        s.to_owned()
    } else {
        crate::text::shorten(s, width.saturating_sub(1))
    }
}

#[derive(Debug, Clone)]
pub struct Comparison {
    pub verdict: Verdict,
    /// One entry per differing field, in the order stdout, stderr, result, error.*.
    pub fields: Vec<FieldDiff>,
}

pub fn compare(v8: &HostOutcome, browser: &HostOutcome, facts: &BrowserFacts) -> Comparison {
    let mut fields = Vec::new();
    for (field, a, b) in field_texts(v8, browser) {
        if a != b {
            fields.push(diff_field(field, &a, &b, facts));
        }
    }
    let verdict = if fields.is_empty() {
        Verdict::Same
    } else if fields.iter().all(|f| f.explained.is_some()) {
        let mut causes: Vec<Inherent> = fields
            .iter()
            .flat_map(|f| f.explained.clone().unwrap_or_default())
            .collect();
        causes.sort();
        causes.dedup();
        Verdict::Inherent(causes)
    } else {
        Verdict::Different
    };
    Comparison { verdict, fields }
}

/// The compared texts, field by field. The result is compared as pretty JSON so that a
/// difference inside a large result points at its line.
fn field_texts(v8: &HostOutcome, browser: &HostOutcome) -> Vec<(&'static str, String, String)> {
    let result = |o: &HostOutcome| serde_json::to_string_pretty(&o.result).unwrap_or_default();
    let error = |o: &HostOutcome, part: fn(&crate::engine::ErrorInfo) -> &str| {
        o.error
            .as_ref()
            .map(|e| part(e).to_owned())
            .unwrap_or_else(|| "(no error)".into())
    };
    vec![
        ("stdout", v8.stdout.clone(), browser.stdout.clone()),
        ("stderr", v8.stderr.clone(), browser.stderr.clone()),
        ("result", result(v8), result(browser)),
        (
            "error.type",
            error(v8, |e| &e.kind),
            error(browser, |e| &e.kind),
        ),
        (
            "error.message",
            error(v8, |e| &e.message),
            error(browser, |e| &e.message),
        ),
        (
            "error.traceback",
            error(v8, |e| &e.traceback),
            error(browser, |e| &e.traceback),
        ),
    ]
}

fn diff_field(field: &'static str, a: &str, b: &str, facts: &BrowserFacts) -> FieldDiff {
    // split_inclusive keeps the newline, so a missing final newline is a difference too.
    let la: Vec<&str> = a.split_inclusive('\n').collect();
    let lb: Vec<&str> = b.split_inclusive('\n').collect();
    let first = (0..la.len().max(lb.len()))
        .find(|&i| la.get(i) != lb.get(i))
        .unwrap_or(0);
    let explained = if la.len() == lb.len() {
        let mut causes = Vec::new();
        let mut all = true;
        for (x, y) in la.iter().zip(&lb).filter(|(x, y)| x != y) {
            match explain(x, y, facts) {
                Some(found) => causes.extend(found),
                None => {
                    all = false;
                    break;
                }
            }
        }
        causes.sort();
        causes.dedup();
        all.then_some(causes)
    } else {
        None
    };
    FieldDiff {
        field,
        line: first + 1,
        v8: la.get(first).map(|s| s.to_string()),
        browser: lb.get(first).map(|s| s.to_string()),
        explained,
    }
}

const ALL: [Inherent; 4] = [
    Inherent::UserAgent,
    Inherent::Locale,
    Inherent::TimeZoneName,
    Inherent::WallClock,
];

/// The line with what `causes` make host-specific replaced by the V8 host's form (or a mask).
fn normalize(line: &str, causes: &[Inherent], facts: &BrowserFacts) -> String {
    let mut s = line.to_owned();
    for cause in causes {
        s = match cause {
            Inherent::UserAgent if !facts.user_agent.is_empty() => {
                s.replace(&facts.user_agent, "UNKNOWN")
            }
            Inherent::Locale => {
                let lang = facts.language.replace('-', "_");
                if lang.is_empty() || lang == "C" {
                    s
                } else {
                    s.replace(&format!("{lang}.UTF-8"), "C.UTF-8")
                        .replace(&format!("'{lang}'"), "'C'")
                }
            }
            Inherent::TimeZoneName => s.replace("UTC-0000", "UTC"),
            Inherent::WallClock => clock_pattern().replace_all(&s, "<clock>").into_owned(),
            Inherent::UserAgent => s,
        };
    }
    s
}

/// The fewest inherent causes that make the two lines equal, or None if all of them do not.
fn explain(v8: &str, browser: &str, facts: &BrowserFacts) -> Option<Vec<Inherent>> {
    if normalize(v8, &ALL, facts) != normalize(browser, &ALL, facts) {
        return None;
    }
    let mut needed = ALL.to_vec();
    for cause in ALL {
        let without: Vec<Inherent> = needed.iter().copied().filter(|c| *c != cause).collect();
        if normalize(v8, &without, facts) == normalize(browser, &without, facts) {
            needed = without;
        }
    }
    Some(needed)
}

/// ISO dates with an optional time, bare times of day, and epoch seconds (2001 to 2286).
fn clock_pattern() -> &'static Regex {
    static PATTERN: OnceLock<Regex> = OnceLock::new();
    PATTERN.get_or_init(|| {
        Regex::new(
            r"\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?)?|\b\d{2}:\d{2}:\d{2}(?:\.\d+)?\b|\b[1-9]\d{9}(?:\.\d+)?\b",
        )
        .unwrap_or_else(|e| panic!("the clock pattern is a valid regex: {e}"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    fn outcome(stdout: &str) -> HostOutcome {
        HostOutcome {
            stdout: stdout.into(),
            stderr: String::new(),
            result: Value::Null,
            error: None,
            ms: 1.0,
        }
    }

    fn facts() -> BrowserFacts {
        BrowserFacts {
            user_agent: "Mozilla/5.0 HeadlessChrome/156".into(),
            language: "en-US".into(),
        }
    }

    #[test]
    fn same_outputs_are_same() {
        let c = compare(&outcome("a\nb\n"), &outcome("a\nb\n"), &facts());
        assert_eq!(c.verdict, Verdict::Same);
        assert!(c.fields.is_empty());
    }

    #[test]
    fn reports_the_first_differing_line_including_a_missing_newline() {
        let c = compare(&outcome("a\nb\nc\n"), &outcome("a\nB\nc"), &facts());
        assert_eq!(c.verdict, Verdict::Different);
        assert_eq!(c.fields[0].line, 2);
        assert_eq!(c.fields[0].browser.as_deref(), Some("B\n"));
        let c = compare(&outcome("a\n"), &outcome("a"), &facts());
        assert_eq!((c.verdict, c.fields[0].line), (Verdict::Different, 1));
    }

    #[test]
    fn names_inherent_causes_but_still_counts_them() {
        let v8 = outcome("runtime='UNKNOWN'\nLANG C.UTF-8\nsame\n");
        let br = outcome("runtime='Mozilla/5.0 HeadlessChrome/156'\nLANG en_US.UTF-8\nsame\n");
        let c = compare(&v8, &br, &facts());
        assert_eq!(
            c.verdict,
            Verdict::Inherent(vec![Inherent::UserAgent, Inherent::Locale])
        );
        assert_ne!(c.verdict, Verdict::Same);
        let clock = compare(
            &outcome("now 2026-12-02 12:00:01.5\n"),
            &outcome("now 2026-12-02 12:00:03.1\n"),
            &facts(),
        );
        assert_eq!(clock.verdict, Verdict::Inherent(vec![Inherent::WallClock]));
    }

    #[test]
    fn an_unexplained_line_makes_it_different() {
        let v8 = outcome("runtime='UNKNOWN'\n0.25\n");
        let br = outcome("runtime='Mozilla/5.0 HeadlessChrome/156'\n0.75\n");
        assert_eq!(compare(&v8, &br, &facts()).verdict, Verdict::Different);
    }
}
