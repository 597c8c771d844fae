//! `widesql serve` as a process: it prints its address once it takes
//! calls, stops cleanly on SIGINT and SIGTERM (exit 0, the database
//! flushed and closed, so another process can open it), and refuses an
//! address that is not a loopback one.

#![allow(
    clippy::expect_used,
    reason = "a test harness: a failed expectation is the test failing"
)]

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

#[cfg(unix)]
#[test]
fn serve_prints_its_address_and_stops_cleanly_on_sigint_and_sigterm() {
    let dir = tempfile::tempdir().expect("a directory");
    for signal in ["INT", "TERM"] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_widesql"))
            .arg("--db")
            .arg(dir.path())
            .args(["serve", "--listen", "127.0.0.1:0"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("serve starts");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("stdout"))
            .read_line(&mut line)
            .expect("a line");
        let addr = line
            .trim()
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("not an address line: {line:?}"));
        assert!(addr.starts_with("127.0.0.1:"), "{addr}");
        let killed = Command::new("kill")
            .args([format!("-{signal}"), child.id().to_string()])
            .status()
            .expect("kill runs");
        assert!(killed.success());
        let status = child.wait().expect("serve ends");
        assert!(status.success(), "SIG{signal}: {status}");
    }
    // The database was closed: this process can open it.
    widesql::Db::open(dir.path()).expect("the database opens after the server stopped");
}

#[test]
fn serve_refuses_an_address_that_is_not_loopback() {
    let dir = tempfile::tempdir().expect("a directory");
    let output = Command::new(env!("CARGO_BIN_EXE_widesql"))
        .arg("--db")
        .arg(dir.path())
        .args(["serve", "--listen", "0.0.0.0:0"])
        .output()
        .expect("the binary runs");
    assert!(!output.status.success());
    let error = String::from_utf8_lossy(&output.stderr);
    assert!(error.contains("refusing to listen on 0.0.0.0:0"), "{error}");
    assert!(error.contains("--insecure"), "{error}");
}
