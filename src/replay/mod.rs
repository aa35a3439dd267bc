//! replay — record an execution's tool traffic to a cassette, and answer a later run from it with
//! no server started.
//!
//! Both ends are [`ToolHost`](crate::bridge::ToolHost)s, the one door between a sandbox and
//! tools: a [`Recorder`] in front of the hub passes everything through and notes what the script
//! saw and did; a [`Player`] stands in for the hub. The engine and the hub know nothing of this.
//!
//!   cassette.rs  the file: JSON lines, read and checked, written whole
//!   record.rs    Recorder: the catalogue the script read, its waits, its calls and their answers
//!   play.rs      Player: answers from the cassette, strict or any order; divergences explained
//!   redact.rs    Redactor: configured secrets and `--redact` keys kept out of cassettes
//!
//! **Invariant:** a replay reads nothing but the cassette: no config, no server, no network;
//! the same script, seed and cassette give the same bytes out on any machine.

mod cassette;
mod play;
mod record;
mod redact;

pub use cassette::{
    Call, Cassette, CassetteError, Header, RecordedLimits, Script, Unavailable, Wait, FORMAT,
    VERSION,
};
pub use play::{MatchMode, Player};
pub use record::{Recorder, RunInfo};
pub use redact::{Redactor, KEY_MARKER, MIN_SECRET_CHARS};

use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A fresh execution id: when it started (UTC, to the second, so a folder of cassettes lists in
/// time order) and 32 random bits, e.g. `20261204-101530-3f9a2c1d`.
pub fn new_execution_id() -> String {
    let mut random = [0u8; 4];
    // Uniqueness, not secrecy: a clock-derived fallback is good enough if the OS cannot help.
    if getrandom::fill(&mut random).is_err() {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or_default();
        random = nanos.to_le_bytes();
    }
    format!(
        "{}-{}",
        chrono::Utc::now().format("%Y%m%d-%H%M%S"),
        random
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<String>()
    )
}

/// Where `serve --record-dir` keeps each execution's cassette, and what it keeps out of them.
pub struct RecordDir {
    dir: PathBuf,
    pub redactor: Arc<Redactor>,
}

impl RecordDir {
    /// Makes `dir` if needed and checks that a cassette can be written there, so a mistake is
    /// reported at start-up rather than lost after each execution.
    pub fn open(dir: &Path, redactor: Redactor) -> std::io::Result<Self> {
        std::fs::create_dir_all(dir)?;
        tempfile::Builder::new()
            .prefix(".cassette-check-")
            .tempfile_in(dir)?;
        Ok(Self {
            dir: dir.to_path_buf(),
            redactor: Arc::new(redactor),
        })
    }

    /// The folder.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The cassette file of execution `id`.
    pub fn path(&self, id: &str) -> PathBuf {
        self.dir.join(format!("{id}.jsonl"))
    }
}

/// The name a cassette is called by in messages a script may read: its file name, never the
/// directory it lies in.
pub fn label(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "the cassette".into())
}
