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
use std::path::PathBuf;
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

/// A self-signed certificate for `localhost` and 127.0.0.1 and its key,
/// written to PEM files in `dir`: their paths, and the certificate.
fn certificate_files(dir: &std::path::Path) -> (PathBuf, PathBuf, String) {
    let certified =
        rcgen::generate_simple_self_signed(vec!["localhost".into(), "127.0.0.1".into()])
            .expect("a certificate");
    let cert_pem = certified.cert.pem();
    let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
    std::fs::write(&cert, &cert_pem).expect("cert written");
    std::fs::write(&key, certified.signing_key.serialize_pem()).expect("key written");
    (cert, key, cert_pem)
}

/// Runs `widesql serve` with `args` and the environment variables `env`,
/// which must fail before it listens, saying `said`.
fn refused(db: &std::path::Path, args: &[&str], env: &[(&str, &str)], said: &str) {
    use std::io::Read;
    let mut child = Command::new(env!("CARGO_BIN_EXE_widesql"))
        .arg("--db")
        .arg(db)
        .arg("serve")
        .args(args)
        .env_remove("WIDESQL_CLUSTER_SECRET")
        .envs(env.iter().copied())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the binary runs");
    // One that serves after all is stopped, not waited for.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let status = loop {
        if let Some(status) = child.try_wait().expect("serve is waited for") {
            break status;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("{args:?} was not refused: it still runs after 30 s");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    assert!(!status.success(), "{args:?}");
    let mut error = String::new();
    child
        .stderr
        .take()
        .expect("stderr")
        .read_to_string(&mut error)
        .expect("stderr read");
    assert!(error.contains(said), "{args:?}: {error}");
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
    let (cert, key, cert_pem) = certificate_files(dir.path());
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
    let join = [
        "--listen",
        "127.0.0.1:0",
        "--worker",
        "--join",
        &master_addr,
    ];
    let refused_db = dir.path().join("refused");
    let other = [("WIDESQL_CLUSTER_SECRET", "another-secret-of-a-cluster")];
    refused(&refused_db, &join, &other, "cluster secret");
    let unset = "the cluster secret (WIDESQL_CLUSTER_SECRET) is not set";
    refused(&refused_db, &join, &[], unset);
    // A master needs the secret too.
    refused(
        &refused_db,
        &["--listen", "127.0.0.1:0", "--master"],
        &[],
        unset,
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
        refused(&dir.path().join("refused"), args, &secret, said);
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

#[cfg(unix)]
#[test]
fn serve_runs_a_cluster_whose_processes_call_each_other_over_tls() {
    let dir = tempfile::tempdir().expect("a directory");
    let (cert, key, _) = certificate_files(dir.path());
    let (cert, key) = (cert.to_string_lossy(), key.to_string_lossy());
    let secret = [("WIDESQL_CLUSTER_SECRET", "a-secret-of-the-test-cluster")];
    let tls = [
        "--listen",
        "127.0.0.1:0",
        "--tls-cert",
        &cert,
        "--tls-key",
        &key,
        "--tls-ca",
        &cert,
    ];
    let mut args = tls.to_vec();
    args.push("--master");
    let (master, master_addr) = start_serve(&dir.path().join("master"), &args, &secret, "");
    let mut args = tls.to_vec();
    args.extend(["--worker", "--join", &master_addr]);
    let (worker, worker_addr) = start_serve(&dir.path().join("worker"), &args, &secret, "");
    // Refused: a master of TLS that trusts no certificates, certificates
    // to trust for a process that is no cluster's, and a worker without
    // TLS joining a master of TLS.
    for (args, said) in [
        (
            &tls[..6],
            "give the certificates it trusts in their answers (--tls-ca)",
        ),
        (&tls[..], "--master"),
        (
            &["--listen", "127.0.0.1:0", "--master", "--tls-ca", &cert][..],
            "--tls-cert",
        ),
        (
            &[
                "--listen",
                "127.0.0.1:0",
                "--worker",
                "--join",
                &master_addr,
            ][..],
            "a worker serves TLS exactly when its master does",
        ),
    ] {
        let mut args = args.to_vec();
        if said.contains("--tls-ca") {
            args.push("--master");
        }
        refused(&dir.path().join("refused"), &args, &secret, said);
    }
    stop(worker, "TERM");
    let log = stop(master, "TERM");
    assert!(
        log.contains("worker joined") && log.contains(&format!("https://{worker_addr}")),
        "{log}"
    );
}
