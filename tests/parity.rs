//! `mcp-code-mode parity` end to end: the corpus (tests/parity) behaves byte for byte the same in
//! the V8 host and in headless Chromium, and deliberately host-specific scripts
//! (tests/parity_negative) are caught and named. Needs Debian's `chromium` and the fixture servers
//! (`npm ci` in tests/fixtures), as .ci/run installs them.

use crate::util::{text, BIN};
use std::path::Path;
use std::process::Output;

pub(crate) fn parity(args: &[&str]) -> Output {
    crate::util::command(BIN)
        .arg("parity")
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env_remove("MCP_CODE_MODE_CHROMIUM")
        .output()
        .expect("the binary runs")
}

/// The table row of `script`.
pub(crate) fn row<'a>(stdout: &'a str, script: &str) -> &'a str {
    stdout
        .lines()
        .find(|l| l.starts_with(&format!("{script} ")))
        .unwrap_or_else(|| panic!("no row for {script} in:\n{stdout}"))
}

/// The summary's `tool calls: A in V8 (B succeeded), C in Chromium (D succeeded)`: [A, B, C, D].
pub(crate) fn tool_call_counts(stdout: &str) -> Vec<usize> {
    let calls: Vec<usize> = stdout
        .lines()
        .find_map(|l| l.strip_prefix("tool calls: "))
        .unwrap_or_else(|| panic!("no tool call count in:\n{stdout}"))
        .split_whitespace()
        .filter_map(|word| word.trim_start_matches('(').parse().ok())
        .collect();
    assert_eq!(calls.len(), 4, "{stdout}");
    calls
}

#[test]
fn the_corpus_behaves_the_same_in_v8_and_chromium() {
    let corpus = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/parity");
    let scripts: Vec<String> = std::fs::read_dir(&corpus)
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".py"))
        .collect();
    assert!(
        scripts.len() >= 30,
        "the corpus has only {} scripts",
        scripts.len()
    );
    let out = parity(&[
        "tests/parity",
        "--config",
        "tests/parity/servers.json",
        "--timeout",
        "60",
    ]);
    let stdout = text(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "parity found differences:\n{stdout}\nstderr:\n{}",
        text(&out.stderr)
    );
    for script in &scripts {
        let line = row(&stdout, script);
        assert!(line.contains(" same "), "{line}");
    }
    // Tool calls really reached the servers (a hub that failed to start would give both hosts the
    // same empty catalogue, and the same errors).
    let calls = tool_call_counts(&stdout);
    assert_eq!((calls[0], calls[1]), (calls[2], calls[3]), "{stdout}");
    assert!(
        calls[1] >= 40,
        "only {} tool calls succeeded:\n{stdout}",
        calls[1]
    );
    assert!(
        stdout.contains(&format!(
            "parity: {} script(s): {} same, 0 different",
            scripts.len(),
            scripts.len()
        )),
        "{stdout}"
    );
}

#[test]
fn host_specific_scripts_are_reported_and_fail_the_run() {
    let out = parity(&["tests/parity_negative", "--no-snapshot", "--timeout", "60"]);
    let stdout = text(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{stdout}\nstderr:\n{}",
        text(&out.stderr)
    );
    assert!(
        row(&stdout, "control_same.py").contains(" same "),
        "{stdout}"
    );
    assert!(
        row(&stdout, "user_agent.py").contains("inherent: user agent"),
        "{stdout}"
    );
    // The details name the cause and show both lines in full.
    assert!(
        stdout.contains("stdout differs from line 1 (inherent: user agent):")
            && stdout.contains("HeadlessChrome"),
        "{stdout}"
    );
    assert!(
        row(&stdout, "locale_lang.py").contains("inherent: locale (LANG)"),
        "{stdout}"
    );
    assert!(
        row(&stdout, "wall_clock.py").contains("inherent: wall clock"),
        "{stdout}"
    );
    let env = row(&stdout, "runtime_env.py");
    assert!(
        env.contains("DIFFERENT") && env.contains("stdout line 1"),
        "{env}"
    );
    assert!(stdout.contains("--- runtime_env.py: DIFFERENT"), "{stdout}");
    assert!(
        stdout.contains("parity: 5 script(s): 1 same, 1 different, 3 inherent, 0 could not run"),
        "{stdout}"
    );
}

#[test]
fn limits_hit_the_same_way_in_both_hosts() {
    let out = parity(&[
        "tests/parity_limits",
        "--timeout",
        "3",
        "--memory-mb",
        "256",
    ]);
    let stdout = text(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}\nstderr:\n{}",
        text(&out.stderr)
    );
    assert!(row(&stdout, "runaway.py").contains(" same "), "{stdout}");
    assert!(
        row(&stdout, "memory_bomb.py").contains(" same "),
        "{stdout}"
    );
}

#[test]
fn a_missing_chromium_is_a_setup_error_that_says_how_to_install_it() {
    let empty = tempfile::tempdir().unwrap();
    let out = crate::util::command(BIN)
        .args(["parity", "tests/parity_negative"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env_remove("MCP_CODE_MODE_CHROMIUM")
        .env("PATH", empty.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("apt-get install chromium"),
        "{}",
        text(&out.stderr)
    );
    let missing = parity(&[
        "tests/parity_negative",
        "--chromium",
        "/nonexistent/chromium",
    ]);
    assert_eq!(missing.status.code(), Some(2));
    assert!(
        text(&missing.stderr).contains("/nonexistent/chromium"),
        "{}",
        text(&missing.stderr)
    );
    let no_scripts = parity(&[empty.path().to_str().unwrap()]);
    assert_eq!(no_scripts.status.code(), Some(2));
    assert!(
        text(&no_scripts.stderr).contains("no *.py scripts"),
        "{}",
        text(&no_scripts.stderr)
    );
}
