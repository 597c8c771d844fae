//! `widesql test`: runs files and directories, reports a broken record with
//! file:line, expected and actual, ends with `N passed, N failed` and exits
//! non-zero on failure; `--complete` writes expected results.

#![expect(
    clippy::expect_used,
    reason = "a test harness: a failed expectation is the test failing"
)]

use std::process::{Command, Output};

fn widesql(args: &[&std::ffi::OsStr]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_widesql"))
        .args(args)
        .output()
        .expect("the binary runs")
}

fn os(s: &str) -> &std::ffi::OsStr {
    std::ffi::OsStr::new(s)
}

#[test]
fn cli_test_reports_a_broken_record() {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("broken.slt");
    std::fs::write(
        &file,
        "statement ok\nCREATE TABLE t (_key VARCHAR PRIMARY KEY, n BIGINT)\n\n\
         statement ok\nINSERT INTO t VALUES ('a', 1)\n\n\
         query I\nSELECT n FROM t\n----\n2\n\n\
         query T\nSELECT _key FROM t\n----\na\n",
    )
    .expect("write");
    let out = widesql(&[os("test"), file.as_os_str()]);
    assert!(!out.status.success(), "a failing file exits non-zero");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("broken.slt:7"),
        "the failing record's file:line: {text}"
    );
    assert!(
        text.contains("-   2") && text.contains("+   1"),
        "expected and actual: {text}"
    );
    assert_eq!(text.lines().last(), Some("3 passed, 1 failed"), "{text}");
}

#[test]
fn cli_test_runs_directories_and_completes_files() {
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::create_dir_all(dir.path().join("nested")).expect("mkdir");
    let file = dir.path().join("nested").join("new.slt");
    std::fs::write(
        &file,
        "statement ok\nCREATE TABLE t (a INT, b VARCHAR)\n\n\
         statement ok\nCREATE INDEX t_a ON t (a)\n\n\
         statement ok\nINSERT INTO t VALUES (1, 'x'), (2, 'y')\n\n\
         query IT rowsort\nSELECT a, b FROM t\n----\n",
    )
    .expect("write");
    let out = widesql(&[os("test"), os("--complete"), dir.path().as_os_str()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let completed = std::fs::read_to_string(&file).expect("read");
    assert!(completed.contains("----\n1 x\n2 y"), "{completed}");
    let out = widesql(&[os("test"), dir.path().as_os_str()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(text.lines().last(), Some("4 passed, 0 failed"), "{text}");
    // The project's own suite passes through the CLI too.
    let suite = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../sql_tests");
    let out = widesql(&[os("test"), suite.as_os_str()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}
