//! `widesql serve` as a process: it prints its address once it takes
//! calls, stops cleanly on SIGINT and SIGTERM (exit 0, the database
//! flushed and closed, so another process can open it), refuses an
//! address that is not a loopback one, serves TLS from certificate files,
//! creates its first admin from a password it never takes as a flag, and
//! runs as a cluster's master or worker with the cluster's secret.

#![expect(
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
        let (child, addr) = start_serve(dir.path(), &["--listen", "127.0.0.1:0"], &[], "");
        assert!(addr.starts_with("127.0.0.1:"), "{addr}");
        stop(child, signal);
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

/// Starts `widesql serve` with `args`, the environment variables `env`
/// (the admin's password among them, or else on standard input), and
/// returns it with the address it printed.
fn start_serve(
    dir: &std::path::Path,
    args: &[&str],
    env: &[(&str, &str)],
    stdin: &str,
) -> (std::process::Child, String) {
    use std::io::Write;
    let mut command = Command::new(env!("CARGO_BIN_EXE_widesql"));
    command
        .arg("--db")
        .arg(dir)
        .arg("serve")
        .args(args)
        .env_remove("WIDESQL_ADMIN_PASSWORD")
        .env_remove("WIDESQL_CLUSTER_SECRET")
        .envs(env.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = command.spawn().expect("serve starts");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(stdin.as_bytes())
        .expect("stdin written");
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("a line");
    let addr = line
        .trim()
        .strip_prefix("listening on ")
        .unwrap_or_else(|| panic!("not an address line: {line:?}"))
        .to_string();
    (child, addr)
}

/// Stops `widesql serve` with SIG`signal`, which it must end on cleanly;
/// what it wrote to standard error.
fn stop(mut child: std::process::Child, signal: &str) -> String {
    use std::io::Read;
    let killed = Command::new("kill")
        .args([format!("-{signal}"), child.id().to_string()])
        .status()
        .expect("kill runs");
    assert!(killed.success());
    let status = child.wait().expect("serve ends");
    assert!(status.success(), "SIG{signal}: {status}");
    let mut log = String::new();
    child
        .stderr
        .take()
        .expect("stderr")
        .read_to_string(&mut log)
        .expect("stderr read");
    log
}

#[cfg(unix)]
#[test]
fn serve_takes_tls_files_and_a_first_admin_whose_password_is_never_a_flag() {
    use arrow_flight::sql::client::FlightSqlServiceClient;
    use tonic::transport::{Certificate, ClientTlsConfig, Endpoint};

    let dir = tempfile::tempdir().expect("a directory");
    let certified =
        rcgen::generate_simple_self_signed(vec!["localhost".into()]).expect("a certificate");
    let cert_pem = certified.cert.pem();
    let cert = dir.path().join("cert.pem");
    let key = dir.path().join("key.pem");
    std::fs::write(&cert, &cert_pem).expect("cert written");
    std::fs::write(&key, certified.signing_key.serialize_pem()).expect("key written");
    let db = dir.path().join("db");
    let (cert, key) = (cert.to_string_lossy(), key.to_string_lossy());
    let tls = [
        "--listen",
        "127.0.0.1:0",
        "--tls-cert",
        &cert,
        "--tls-key",
        &key,
    ];

    // The password from the environment.
    let mut args = tls.to_vec();
    args.extend(["--init-admin", "admin"]);
    let (child, addr) = start_serve(&db, &args, &[("WIDESQL_ADMIN_PASSWORD", "from env")], "");
    let port = addr.rsplit(':').next().expect("a port").to_string();
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    runtime.block_on(async {
        let channel = Endpoint::from_shared(format!("https://localhost:{port}"))
            .expect("an endpoint")
            .tls_config(
                ClientTlsConfig::new()
                    .ca_certificate(Certificate::from_pem(&cert_pem))
                    .domain_name("localhost"),
            )
            .expect("a TLS config")
            .connect()
            .await
            .expect("a TLS connection");
        let mut client = FlightSqlServiceClient::new(channel);
        assert!(client.handshake("admin", "wrong").await.is_err());
        client
            .handshake("admin", "from env")
            .await
            .expect("signed in");
        client
            .execute_update("CREATE TABLE t (_key VARCHAR PRIMARY KEY)".into(), None)
            .await
            .expect("the admin creates a table");
    });
    // One log line per call: who, what, how it ended; never a password.
    let log = stop(child, "TERM");
    assert!(log.contains("created admin user 'admin'"), "{log}");
    let created = log
        .lines()
        .find(|l| l.contains("DoPutUpdate"))
        .unwrap_or_else(|| panic!("no line for the update: {log}"));
    assert!(
        created.contains("user=\"admin\"") || created.contains("user=admin"),
        "{created}"
    );
    assert!(
        created.contains("CREATE") && created.contains("done"),
        "{created}"
    );
    let refused = log
        .lines()
        .find(|l| l.contains("Handshake") && l.contains("refused"))
        .unwrap_or_else(|| panic!("no line for the wrong password: {log}"));
    assert!(refused.contains("wrong user name or password"), "{refused}");
    assert!(
        !log.contains("from env"),
        "a password reached the log: {log}"
    );

    // The same admin again is refused; another one reads its password
    // from standard input.
    let output = Command::new(env!("CARGO_BIN_EXE_widesql"))
        .arg("--db")
        .arg(&db)
        .args(["serve", "--listen", "127.0.0.1:0", "--init-admin", "admin"])
        .env("WIDESQL_ADMIN_PASSWORD", "x")
        .output()
        .expect("the binary runs");
    assert!(!output.status.success());
    let error = String::from_utf8_lossy(&output.stderr);
    assert!(error.contains("user 'admin' already exists"), "{error}");
    let mut args = tls.to_vec();
    args.extend(["--init-admin", "second"]);
    let (child, _) = start_serve(&db, &args, &[], "from stdin\n");
    let log = stop(child, "TERM");
    assert!(
        !log.contains("from stdin"),
        "a password reached the log: {log}"
    );
    let opened = widesql::Db::open(&db).expect("the database opens");
    opened
        .authenticate("admin", "from env")
        .expect("the first admin");
    opened
        .authenticate("second", "from stdin")
        .expect("the second admin");
    assert!(opened.open_table("default", "public", "t").is_ok());
}

#[cfg(unix)]
#[test]
fn serve_runs_a_master_and_a_worker_that_joins_it_with_the_shared_secret() {
    let dir = tempfile::tempdir().expect("a directory");
    let (master_db, worker_db) = (dir.path().join("master"), dir.path().join("worker"));
    let secret = [("WIDESQL_CLUSTER_SECRET", "a-secret-of-the-test-cluster")];
    let listen = ["--listen", "127.0.0.1:0"];
    let mut args = listen.to_vec();
    args.push("--master");
    let (master, master_addr) = start_serve(&master_db, &args, &secret, "");
    let mut args = listen.to_vec();
    args.extend(["--worker", "--join", &master_addr]);
    // A worker prints its address once it has joined.
    let (worker, worker_addr) = start_serve(&worker_db, &args, &secret, "");
    assert!(worker_addr.starts_with("127.0.0.1:"), "{worker_addr}");

    // Another secret, or none, and the worker does not start.
    for env in [
        &[("WIDESQL_CLUSTER_SECRET", "another-secret-of-a-cluster")][..],
        &[],
    ] {
        let output = Command::new(env!("CARGO_BIN_EXE_widesql"))
            .arg("--db")
            .arg(dir.path().join("refused"))
            .args(["serve", "--listen", "127.0.0.1:0", "--worker", "--join"])
            .arg(&master_addr)
            .env_remove("WIDESQL_CLUSTER_SECRET")
            .envs(env.iter().copied())
            .output()
            .expect("the binary runs");
        assert!(!output.status.success());
        let error = String::from_utf8_lossy(&output.stderr);
        let expected = if env.is_empty() {
            "the cluster secret (WIDESQL_CLUSTER_SECRET) is not set"
        } else {
            "cluster secret"
        };
        assert!(error.contains(expected), "{error}");
    }
    // A master needs the secret too.
    let output = Command::new(env!("CARGO_BIN_EXE_widesql"))
        .arg("--db")
        .arg(dir.path().join("refused"))
        .args(["serve", "--listen", "127.0.0.1:0", "--master"])
        .env_remove("WIDESQL_CLUSTER_SECRET")
        .output()
        .expect("the binary runs");
    assert!(!output.status.success());
    let error = String::from_utf8_lossy(&output.stderr);
    assert!(
        error.contains("(WIDESQL_CLUSTER_SECRET) is not set"),
        "{error}"
    );
    // A worker that advertises a host is named by it and its port.
    let mut args = listen.to_vec();
    args.extend([
        "--worker",
        "--join",
        &master_addr,
        "--advertise",
        "localhost",
    ]);
    let (named, named_addr) = start_serve(&dir.path().join("named"), &args, &secret, "");
    let port = named_addr.rsplit(':').next().expect("a port");
    // Every address without a host to advertise, and --advertise without
    // a cluster role, are refused.
    for (args, said) in [
        (
            &["--listen", "0.0.0.0:0", "--master", "--insecure"][..],
            "give --advertise HOST",
        ),
        (
            &["--listen", "127.0.0.1:0", "--advertise", "db1"][..],
            "--master",
        ),
    ] {
        let output = Command::new(env!("CARGO_BIN_EXE_widesql"))
            .arg("--db")
            .arg(dir.path().join("refused"))
            .arg("serve")
            .args(args)
            .envs(secret)
            .output()
            .expect("the binary runs");
        assert!(!output.status.success(), "{args:?}");
        let error = String::from_utf8_lossy(&output.stderr);
        assert!(error.contains(said), "{args:?}: {error}");
    }
    stop(named, "TERM");
    stop(worker, "TERM");
    let log = stop(master, "TERM");
    assert!(
        log.contains("worker joined") && log.contains(&format!("http://{worker_addr}")),
        "{log}"
    );
    assert!(log.contains(&format!("http://localhost:{port}")), "{log}");
    assert!(!log.contains("a-secret-of-the-test-cluster"), "{log}");
}
