//! Files a job carries in (put in the script's working directory before it runs) and files the
//! script leaves under `/output/` (returned with the outcome).
//!
//! Both cross the sandbox boundary inside JSON (the job, the report) as base64. What comes back is
//! checked here again, whatever the sandbox's Python claims: the child is hostile, so names,
//! count and sizes are held to [`OutputLimits`] before a byte is kept.

use base64::Engine as _;
use serde::{Deserialize, Serialize};

/// The directory, inside the sandbox, whose files come back with the outcome.
pub const OUTPUT_DIR: &str = "/output";

/// The most a job's files may come to in all, whatever the caller's own caps: a forked child reads
/// its job (files as base64) under a 64 MiB frame limit.
pub const MAX_JOB_FILES_BYTES: usize = 32 << 20;

/// A file placed in the script's working directory before it runs.
#[derive(Debug, Clone, PartialEq)]
pub struct InputFile {
    /// Relative to the working directory (checked by [`check_relative_path`]).
    pub path: String,
    pub bytes: Vec<u8>,
}

impl Serialize for InputFile {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let mut file = s.serialize_struct("InputFile", 2)?;
        file.serialize_field("path", &self.path)?;
        file.serialize_field("base64", &BASE64.encode(&self.bytes))?;
        file.end()
    }
}

/// What a script may send out through `/output/` in one job. The sandbox's Python honours these
/// (it reads no file it would drop); the host enforces them on whatever the report holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct OutputLimits {
    pub max_files: usize,
    pub max_file_bytes: usize,
    pub max_total_bytes: usize,
}

impl Default for OutputLimits {
    fn default() -> Self {
        Self {
            max_files: 64,
            max_file_bytes: 8 << 20,
            max_total_bytes: 16 << 20,
        }
    }
}

impl OutputLimits {
    /// The most a report's file list can hold as base64 JSON: for the frame limit of a child.
    pub fn max_report_bytes(&self) -> usize {
        self.max_total_bytes / 3 * 4 + 8 + self.max_files.saturating_mul(8 << 10)
    }
}

/// A file the script left under `/output/` (created or changed by this job).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OutputFile {
    /// Relative to `/output/`.
    pub path: String,
    #[serde(skip)]
    pub bytes: Vec<u8>,
    pub size: usize,
}

/// How the report lists a file (see codemode.py's `_collect_outputs`).
#[derive(Debug, Deserialize)]
pub(crate) struct ReportedOutput {
    path: String,
    base64: String,
}

/// A file the sandbox's Python left out, and why: `count`, `file` (too large) or `total`.
#[derive(Debug, Deserialize)]
pub(crate) struct SkippedOutput {
    path: String,
    #[serde(default)]
    size: usize,
    why: String,
}

const BASE64: base64::engine::GeneralPurpose = base64::engine::general_purpose::STANDARD;

/// Decodes a client's base64 (standard alphabet, padding optional, no whitespace).
pub fn decode_base64(text: &str) -> Result<Vec<u8>, base64::DecodeError> {
    base64::engine::general_purpose::GeneralPurpose::new(
        &base64::alphabet::STANDARD,
        base64::engine::GeneralPurposeConfig::new()
            .with_decode_padding_mode(base64::engine::DecodePaddingMode::Indifferent),
    )
    .decode(text)
}

pub fn encode_base64(bytes: &[u8]) -> String {
    BASE64.encode(bytes)
}

/// The longest file name accepted, in bytes (a path's parts each, and the whole path).
const MAX_NAME_PART: usize = 255;
const MAX_PATH: usize = 1024;

/// Whether `path` names a file below a directory without leaving it: relative, `/`-separated,
/// no empty, `.` or `..` part, no control characters or backslashes. The error says what is
/// wrong, for the message that names the file.
pub fn check_relative_path(path: &str) -> Result<(), String> {
    if path.is_empty() {
        return Err("the name is empty".into());
    }
    if path.starts_with('/') {
        return Err("it is an absolute path; give a path relative to the working directory".into());
    }
    if path.len() > MAX_PATH {
        return Err(format!(
            "the name is {} bytes, more than {MAX_PATH}",
            path.len()
        ));
    }
    if path.contains('\\') {
        return Err("it holds a backslash; separate directories with /".into());
    }
    if path.chars().any(char::is_control) {
        return Err("it holds a control character".into());
    }
    for part in path.split('/') {
        match part {
            "" => return Err("it has an empty part (// or a trailing /)".into()),
            "." | ".." => {
                return Err(format!(
                    "it has a '{part}' part; names must stay inside the directory"
                ))
            }
            p if p.len() > MAX_NAME_PART => {
                return Err(format!(
                    "a part of it is {} bytes, more than {MAX_NAME_PART}",
                    p.len()
                ))
            }
            _ => {}
        }
    }
    Ok(())
}

/// Why a file was not returned, in words (one copy for what Python skipped and what the host
/// refused).
fn not_returned(path: &str, size: usize, why: &str, limits: &OutputLimits) -> String {
    match why {
        "file" => format!(
            "/output/{path}: not returned: {size} bytes, more than the {} one returned file may have",
            limits.max_file_bytes
        ),
        "total" => format!(
            "/output/{path}: not returned: it would take the files returned by this call past {} bytes in all",
            limits.max_total_bytes
        ),
        "count" => format!(
            "/output/{path}: not returned: a call returns at most {} files",
            limits.max_files
        ),
        other => format!("/output/{path:.200}: not returned: {other:.200}"),
    }
}

/// The most notes about files not returned that an outcome carries (the rest are counted).
const MAX_NOTES: usize = 20;

/// The files a report lists, checked against `limits` (names, count, sizes, base64), and what
/// was left out, in words.
pub(crate) fn take_outputs(
    reported: Vec<ReportedOutput>,
    skipped: Vec<SkippedOutput>,
    limits: &OutputLimits,
) -> (Vec<OutputFile>, Vec<String>) {
    let mut files: Vec<OutputFile> = Vec::new();
    let mut notes = Vec::new();
    let mut total = 0usize;
    let mut omitted = 0usize;
    let mut note = |notes: &mut Vec<String>, text: String| {
        if notes.len() < MAX_NOTES {
            notes.push(text);
        } else {
            omitted += 1;
        }
    };
    for s in skipped {
        let path = s.path.chars().take(MAX_PATH).collect::<String>();
        note(&mut notes, not_returned(&path, s.size, &s.why, limits));
    }
    for file in reported {
        let path = file.path;
        if let Err(why) = check_relative_path(&path) {
            note(
                &mut notes,
                format!(
                    "{:?}: not returned: {why}",
                    path.chars().take(200).collect::<String>()
                ),
            );
            continue;
        }
        if files.iter().any(|f| f.path == path) {
            continue;
        }
        if files.len() >= limits.max_files {
            note(&mut notes, not_returned(&path, 0, "count", limits));
            continue;
        }
        // Checked before decoding: base64 is 4 bytes per 3.
        let size_bound = file.base64.len() / 4 * 3;
        if size_bound > limits.max_file_bytes + 3 {
            note(&mut notes, not_returned(&path, size_bound, "file", limits));
            continue;
        }
        let bytes = match BASE64.decode(&file.base64) {
            Ok(bytes) => bytes,
            Err(e) => {
                note(&mut notes, format!("/output/{path}: not returned: {e}"));
                continue;
            }
        };
        if bytes.len() > limits.max_file_bytes {
            note(&mut notes, not_returned(&path, bytes.len(), "file", limits));
            continue;
        }
        if total + bytes.len() > limits.max_total_bytes {
            note(
                &mut notes,
                not_returned(&path, bytes.len(), "total", limits),
            );
            continue;
        }
        total += bytes.len();
        files.push(OutputFile {
            size: bytes.len(),
            path,
            bytes,
        });
    }
    if omitted > 0 {
        notes.push(format!("and {omitted} more files not returned"));
    }
    (files, notes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_that_leave_the_directory_are_refused() {
        for ok in ["data.csv", "a/b/c.txt", "..hidden", "x..y", "é.txt"] {
            assert_eq!(check_relative_path(ok), Ok(()), "{ok}");
        }
        for (bad, why) in [
            ("", "empty"),
            ("/etc/passwd", "absolute"),
            ("../x", "'..'"),
            ("a/../../x", "'..'"),
            ("./x", "'.'"),
            ("a//b", "empty part"),
            ("a/", "empty part"),
            ("a\\b", "backslash"),
            ("a\nb", "control"),
        ] {
            let e = check_relative_path(bad).expect_err(bad);
            assert!(e.contains(why), "{bad:?}: {e}");
        }
        assert!(check_relative_path(&"x".repeat(300)).is_err());
    }

    fn reported(path: &str, bytes: &[u8]) -> ReportedOutput {
        ReportedOutput {
            path: path.into(),
            base64: encode_base64(bytes),
        }
    }

    #[test]
    fn what_a_hostile_report_lists_is_held_to_the_limits() {
        let limits = OutputLimits {
            max_files: 2,
            max_file_bytes: 10,
            max_total_bytes: 15,
        };
        let (files, notes) = take_outputs(
            vec![
                reported("../escape", b"x"),
                reported("a.txt", b"0123456789"),
                reported("big.bin", &[0; 11]),
                reported("b.txt", b"0123456"),
                reported("c.txt", b"01"),
                reported("d.txt", b"0"),
                ReportedOutput {
                    path: "e.txt".into(),
                    base64: "!!".into(),
                },
            ],
            vec![],
            &limits,
        );
        let names: Vec<_> = files.iter().map(|f| f.path.as_str()).collect();
        assert_eq!(names, ["a.txt", "c.txt"]);
        let notes = notes.join("\n");
        for expected in [
            "\"../escape\": not returned",
            "big.bin: not returned: 11 bytes, more than the 10",
            "b.txt: not returned: it would take the files returned by this call past 15 bytes",
            "d.txt: not returned: a call returns at most 2 files",
        ] {
            assert!(notes.contains(expected), "{expected} in {notes}");
        }
    }
}
