//! execute_code's files in and out and large results (tests/mcp_client/data.py, the real Python
//! `mcp` client), over stdio and HTTP, in both kinds of sandbox; and `run --input/--output-dir`.

use crate::util::{cli, text};

fn check(transport: &str, sandbox: &str, mode: &str) {
    crate::util::python_driver(
        "data.py",
        &[
            "--transport",
            transport,
            "--sandbox",
            sandbox,
            "--mode",
            mode,
        ],
        "ok: data (",
    );
}

#[test]
fn stdio_fork() {
    check("stdio", "fork", "legacy");
}

#[test]
fn stdio_thread() {
    check("stdio", "thread", "auto");
}

#[test]
fn http_fork() {
    check("http", "fork", "legacy");
}

#[test]
fn http_thread() {
    check("http", "thread", "legacy");
}

#[test]
fn run_takes_inputs_and_saves_outputs() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("numbers.txt");
    std::fs::write(&input, "1\n2\n39\n").unwrap();
    let blob = dir.path().join("blob.bin");
    std::fs::write(&blob, [0u8, 159, 146, 150]).unwrap();
    let out_dir = dir.path().join("out");
    let script = dir.path().join("script.py");
    std::fs::write(
        &script,
        "total = sum(int(n) for n in open('numbers.txt'))\n\
         import os\nos.makedirs('/output/sub', exist_ok=True)\n\
         open('/output/sub/total.txt', 'w').write(str(total))\n\
         open('/output/copy.bin', 'wb').write(open('data/b.bin', 'rb').read())\n\
         total\n",
    )
    .unwrap();
    let args = [
        "run".to_owned(),
        script.display().to_string(),
        "--input".into(),
        input.display().to_string(),
        "--input".into(),
        format!("data/b.bin={}", blob.display()),
        "--output-dir".into(),
        out_dir.display().to_string(),
    ];
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = cli(&args, "");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "42\n");
    assert_eq!(
        std::fs::read_to_string(out_dir.join("sub/total.txt")).unwrap(),
        "42"
    );
    assert_eq!(
        std::fs::read(out_dir.join("copy.bin")).unwrap(),
        [0u8, 159, 146, 150]
    );

    // A name that would leave the working directory is refused, naming it.
    let bad = format!("../x={}", input.display());
    let out = cli(&["run", "-", "--input", &bad], "1");
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("\"../x\" is not a usable name"),
        "{}",
        text(&out.stderr)
    );

    // A symbolic link in --output-dir that would lead out of it is not followed.
    let outside = dir.path().join("outside");
    std::fs::create_dir(&outside).unwrap();
    let linked = dir.path().join("linked");
    std::fs::create_dir(&linked).unwrap();
    std::os::unix::fs::symlink(&outside, linked.join("sub")).unwrap();
    let out = cli(
        &[
            "run",
            "-",
            "--output-dir",
            linked.to_str().unwrap(),
        ],
        "import os\nos.makedirs('/output/sub', exist_ok=True)\nopen('/output/sub/x.txt', 'w').write('x')\n",
    );
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("is a symbolic link"),
        "{}",
        text(&out.stderr)
    );
    assert!(std::fs::read_dir(&outside).unwrap().next().is_none());
}

/// 2026-07-28 over HTTP has no sessions: a client still reads what its executions left.
#[test]
fn http_sessionless() {
    check("http", "thread", "auto");
}

#[test]
fn the_local_executor_refuses_files() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.txt");
    std::fs::write(&input, "x").unwrap();
    let out = cli(
        &[
            "run",
            "-",
            "--executor",
            "local",
            "--input",
            input.to_str().unwrap(),
        ],
        "print('ran')",
    );
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(!text(&out.stdout).contains("ran"));
    assert!(
        text(&out.stderr).contains("files= needs the sandbox"),
        "{}",
        text(&out.stderr)
    );
}
