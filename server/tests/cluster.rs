//! A cluster on 127.0.0.1: workers join a master with the shared secret
//! and are listed by `SHOW WORKERS`, up while they call and down once they
//! stop, up again when they come back; calls between the processes
//! without the secret, and workers of another secret or of a process that
//! is not a master, are refused; a cluster's processes serve TLS all or
//! none.

use std::time::{Duration, Instant};

use datafusion::arrow::util::display::array_value_to_string;
use tonic::transport::Endpoint;
use tonic::Code;
use widesql::Db;
use widesql_server::{
    ClusterSecret, MasterOptions, ServeError, ServeOptions, Server, WorkerOptions, WorkerServer,
};

#[expect(
    dead_code,
    reason = "the cluster helpers are shared by every cluster test; this one uses some"
)]
mod common;

use common::{master_options, worker_options, TestTls};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

const SECRET: &str = "a-secret-of-the-test-cluster";

/// A free loopback port.
const ANY_PORT: std::net::SocketAddr =
    std::net::SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 0);

fn secret(text: &str) -> Result<ClusterSecret, BoxError> {
    Ok(ClusterSecret::new(text)?)
}

/// A master on a free loopback port whose workers beat every 50 ms.
async fn master() -> Result<(tempfile::TempDir, Db, Server), BoxError> {
    let dir = tempfile::tempdir()?;
    let db = Db::open(dir.path())?;
    let master = MasterOptions {
        heartbeat: Duration::from_millis(50),
        ..MasterOptions::new(secret(SECRET)?)
    };
    let options = ServeOptions {
        listen: "127.0.0.1:0".parse()?,
        master: Some(master),
        ..ServeOptions::default()
    };
    let server = Server::start(db.clone(), options).await?;
    Ok((dir, db, server))
}

/// A worker of `master` on `listen`, over the database `db`.
async fn worker(
    db: &Db,
    master: &Server,
    listen: std::net::SocketAddr,
    secret_text: &str,
) -> Result<WorkerServer, ServeError> {
    let options = WorkerOptions {
        listen,
        advertise: None,
        master: master.local_addr().to_string(),
        secret: ClusterSecret::new(secret_text)?,
        tls: None,
        tls_ca: None,
        insecure: false,
    };
    WorkerServer::start(db.clone(), options).await
}

/// `SHOW WORKERS` on `db`, as "worker state" lines.
async fn workers(db: &Db) -> Result<Vec<String>, BoxError> {
    let batches = db.session().sql("SHOW WORKERS").await?.collect().await?;
    let mut lines = Vec::new();
    for batch in &batches {
        for row in 0..batch.num_rows() {
            lines.push(format!(
                "{} {}",
                array_value_to_string(batch.column(0), row)?,
                array_value_to_string(batch.column(1), row)?
            ));
        }
    }
    Ok(lines)
}

/// Waits (up to ten seconds) until `SHOW WORKERS` on `db` lists `expected`.
async fn until_workers(db: &Db, expected: &[String]) -> Result<(), BoxError> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let listed = workers(db).await?;
        if listed == expected {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!("SHOW WORKERS lists {listed:?}, not {expected:?}").into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn workers_join_and_are_down_once_they_stop_and_up_when_back() -> Result<(), BoxError> {
    let (_dir, db, master) = master().await?;
    assert!(workers(&db).await?.is_empty());
    let dirs = [tempfile::tempdir()?, tempfile::tempdir()?];
    let dbs = [Db::open(dirs[0].path())?, Db::open(dirs[1].path())?];
    let first = worker(&dbs[0], &master, ANY_PORT, SECRET).await?;
    let second = worker(&dbs[1], &master, ANY_PORT, SECRET).await?;
    let (a, b) = (first.local_addr(), second.local_addr());
    let mut expected = vec![format!("http://{a} up"), format!("http://{b} up")];
    expected.sort();
    until_workers(&db, &expected).await?;

    first.shutdown().await?;
    let down = |addr: std::net::SocketAddr, up: std::net::SocketAddr| {
        let mut lines = vec![format!("http://{addr} down"), format!("http://{up} up")];
        lines.sort();
        lines
    };
    until_workers(&db, &down(a, b)).await?;

    // Back on the same address: the same worker.
    let again = worker(&dbs[0], &master, a, SECRET).await?;
    until_workers(&db, &expected).await?;
    again.shutdown().await?;
    second.shutdown().await?;
    master.shutdown().await?;
    Ok(())
}

#[tokio::test]
async fn a_worker_of_another_secret_or_of_a_process_that_is_no_master_is_refused(
) -> Result<(), BoxError> {
    let (_dir, db, master) = master().await?;
    let dir = tempfile::tempdir()?;
    let worker_db = Db::open(dir.path())?;
    let Err(ServeError::Join { status, .. }) = worker(
        &worker_db,
        &master,
        ANY_PORT,
        "another-secret-of-another-cluster",
    )
    .await
    else {
        return Err("a worker of another secret joined".into());
    };
    assert_eq!(status.code(), Code::Unauthenticated);
    assert!(status.message().contains("cluster secret"), "{status}");
    assert!(workers(&db).await?.is_empty());

    let single_dir = tempfile::tempdir()?;
    let single = Server::start(
        Db::open(single_dir.path())?,
        ServeOptions {
            listen: "127.0.0.1:0".parse()?,
            ..ServeOptions::default()
        },
    )
    .await?;
    let Err(refused) = worker(&worker_db, &single, ANY_PORT, SECRET).await else {
        return Err("a worker joined a process that is no master".into());
    };
    assert!(
        refused.to_string().contains("not a cluster's master"),
        "{refused}"
    );
    single.shutdown().await?;
    master.shutdown().await?;
    Ok(())
}

/// Calls `path` at `addr` with an empty message, carrying `secret` or
/// none, and returns the code it ends with.
async fn call(
    addr: std::net::SocketAddr,
    path: &'static str,
    secret: Option<&str>,
) -> Result<Code, BoxError> {
    let channel = Endpoint::from_shared(format!("http://{addr}"))?
        .connect()
        .await?;
    let mut client = tonic::client::Grpc::new(channel);
    client.ready().await?;
    let mut request = tonic::Request::new(());
    if let Some(secret) = secret {
        request
            .metadata_mut()
            .insert("x-widesql-cluster-secret", secret.parse()?);
    }
    let codec = tonic_prost::ProstCodec::<(), ()>::default();
    let answer = client
        .unary(request, http::uri::PathAndQuery::from_static(path), codec)
        .await;
    Ok(answer.map_or_else(|status| status.code(), |_| Code::Ok))
}

#[tokio::test]
async fn calls_between_the_processes_need_the_secret() -> Result<(), BoxError> {
    let (_dir, _db, master) = master().await?;
    let dir = tempfile::tempdir()?;
    let worker_db = Db::open(dir.path())?;
    let worker = worker(&worker_db, &master, ANY_PORT, SECRET).await?;
    let join = "/widesql.cluster.Cluster/Join";
    let info = "/worker.WorkerService/GetWorkerInfo";
    for (addr, path) in [(master.local_addr(), join), (worker.local_addr(), info)] {
        assert_eq!(
            call(addr, path, None).await?,
            Code::Unauthenticated,
            "{path}"
        );
        assert_eq!(
            call(addr, path, Some("another-secret-of-another-cluster")).await?,
            Code::Unauthenticated,
            "{path}"
        );
    }
    // With the secret the calls are taken: a join without an address is
    // refused for what it says, the worker's own call answers.
    assert_eq!(
        call(master.local_addr(), join, Some(SECRET)).await?,
        Code::InvalidArgument
    );
    assert_eq!(
        call(worker.local_addr(), info, Some(SECRET)).await?,
        Code::Ok
    );
    worker.shutdown().await?;
    master.shutdown().await?;
    Ok(())
}

#[tokio::test]
async fn a_worker_needs_a_master_to_reach_and_a_loopback_address() -> Result<(), BoxError> {
    let (_dir, _db, master) = master().await?;
    let dir = tempfile::tempdir()?;
    let worker_db = Db::open(dir.path())?;
    // A port nobody listens on: the one of a listener just closed.
    let closed = std::net::TcpListener::bind(ANY_PORT)?.local_addr()?;
    let options = WorkerOptions {
        listen: ANY_PORT,
        advertise: None,
        master: closed.to_string(),
        secret: secret(SECRET)?,
        tls: None,
        tls_ca: None,
        insecure: false,
    };
    match WorkerServer::start(worker_db.clone(), options.clone()).await {
        Err(ServeError::Join { master, status }) => {
            assert_eq!(master, closed.to_string());
            assert_eq!(status.code(), Code::Unavailable, "{status}");
        }
        Err(other) => return Err(format!("refused for another reason: {other}").into()),
        Ok(_) => return Err("a worker started without a master".into()),
    }
    let anywhere = WorkerOptions {
        listen: "0.0.0.0:0".parse()?,
        master: master.local_addr().to_string(),
        ..options.clone()
    };
    let Err(refused) = WorkerServer::start(worker_db.clone(), anywhere).await else {
        return Err("a worker listened on every address".into());
    };
    assert!(matches!(refused, ServeError::Insecure { .. }), "{refused}");
    assert!(refused.to_string().contains("--insecure"), "{refused}");
    // Every address, allowed, still names no host the master can dial:
    // refused before it listens.
    let unnamed = WorkerOptions {
        listen: "0.0.0.0:0".parse()?,
        master: master.local_addr().to_string(),
        insecure: true,
        ..options
    };
    let Err(refused) = WorkerServer::start(worker_db.clone(), unnamed.clone()).await else {
        return Err("a worker joined under the name 0.0.0.0".into());
    };
    assert!(matches!(refused, ServeError::Advertise { .. }), "{refused}");
    assert!(
        refused.to_string().contains("--advertise HOST"),
        "{refused}"
    );
    let with_port = WorkerOptions {
        advertise: Some("localhost:7000".into()),
        ..unnamed
    };
    let Err(refused) = WorkerServer::start(worker_db, with_port).await else {
        return Err("a worker advertised a host with a port".into());
    };
    assert!(
        refused
            .to_string()
            .contains("\"localhost:7000\" is not a host"),
        "{refused}"
    );
    // So is a master.
    let anywhere_master = ServeOptions {
        listen: "0.0.0.0:0".parse()?,
        insecure: true,
        master: Some(MasterOptions::new(secret(SECRET)?)),
        ..ServeOptions::default()
    };
    let Err(refused) = Server::start(Db::open(dir.path().join("m"))?, anywhere_master).await else {
        return Err("a master listened on every address without a host".into());
    };
    assert!(matches!(refused, ServeError::Advertise { .. }), "{refused}");
    master.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clusters_processes_serve_tls_all_or_none() -> Result<(), BoxError> {
    let dirs = [tempfile::tempdir()?, tempfile::tempdir()?];
    let (tls, other) = (TestTls::new()?, TestTls::new()?);
    let db = Db::open(dirs[0].path())?;
    // A master that serves TLS must be given the certificates it trusts
    // in its workers' answers.
    let mut untrusting = master_options(Some(&tls))?;
    if let Some(master) = untrusting.master.as_mut() {
        master.tls_ca = None;
    }
    let Err(refused) = Server::start(db.clone(), untrusting).await else {
        return Err("a master of TLS started trusting no certificate".into());
    };
    assert!(matches!(refused, ServeError::ClusterTls(_)), "{refused}");
    assert!(refused.to_string().contains("(--tls-ca)"), "{refused}");
    let master = Server::start(db.clone(), master_options(Some(&tls))?).await?;
    let worker_db = Db::open(dirs[1].path())?;
    let joined = |options: WorkerOptions| WorkerServer::start(worker_db.clone(), options);
    // A worker without TLS cannot join it.
    match joined(worker_options(&master, ANY_PORT, None)?).await {
        Err(ServeError::Join { status, .. }) => {
            assert_eq!(status.code(), Code::Unavailable, "{status}");
            assert!(
                status
                    .message()
                    .contains("a worker serves TLS exactly when its master does"),
                "{status}"
            );
        }
        Err(other) => return Err(format!("refused for another reason: {other}").into()),
        Ok(_) => return Err("a worker without TLS joined a master of TLS".into()),
    }
    // Nor can one that does not trust the master's certificate.
    let distrusting = WorkerOptions {
        tls_ca: Some(other.ca.clone()),
        ..worker_options(&master, ANY_PORT, Some(&tls))?
    };
    let hint = "a worker serves TLS exactly when its master does";
    match joined(distrusting).await {
        Err(ServeError::Join { status, .. }) => {
            assert_eq!(status.code(), Code::Unavailable, "{status}");
            assert!(status.message().contains(hint), "{status}");
        }
        Err(other) => return Err(format!("refused for another reason: {other}").into()),
        Ok(_) => return Err("a worker joined a master whose certificate it distrusts".into()),
    }
    // A worker with TLS needs certificates to trust, and certificates to
    // trust are for a worker with TLS.
    for (options, said) in [
        (
            WorkerOptions {
                tls_ca: None,
                ..worker_options(&master, ANY_PORT, Some(&tls))?
            },
            "(--tls-ca)",
        ),
        (
            WorkerOptions {
                tls: None,
                ..worker_options(&master, ANY_PORT, Some(&tls))?
            },
            "give --tls-cert and --tls-key too",
        ),
    ] {
        let Err(refused) = joined(options).await else {
            return Err(format!("a worker started without what {said} asks").into());
        };
        assert!(matches!(refused, ServeError::ClusterTls(_)), "{refused}");
        assert!(refused.to_string().contains(said), "{refused}");
    }
    // A worker without TLS never sends the secret beyond this machine,
    // unless told to.
    let far = WorkerOptions {
        master: "db1.invalid:50051".into(),
        ..worker_options(&master, ANY_PORT, None)?
    };
    let Err(refused) = joined(far).await else {
        return Err("a worker without TLS joined a master on another machine".into());
    };
    assert!(
        refused
            .to_string()
            .contains("joins only a master on a loopback address"),
        "{refused}"
    );
    // A worker of TLS never calls its master without it.
    let in_the_clear = WorkerOptions {
        master: format!("http://{}", master.local_addr()),
        ..worker_options(&master, ANY_PORT, Some(&tls))?
    };
    match joined(in_the_clear).await {
        Err(ServeError::Join { status, .. }) => {
            assert_eq!(status.code(), Code::InvalidArgument, "{status}");
            assert!(status.message().contains("https:// addresses"), "{status}");
        }
        Err(other) => return Err(format!("refused for another reason: {other}").into()),
        Ok(_) => return Err("a worker called its master without TLS".into()),
    }
    // TLS lets a worker listen beyond loopback without --insecure: this
    // one gets as far as naming itself (and is refused there, before it
    // listens, for naming no host).
    let everywhere = WorkerOptions {
        listen: "0.0.0.0:0".parse()?,
        ..worker_options(&master, ANY_PORT, Some(&tls))?
    };
    let Err(refused) = joined(everywhere).await else {
        return Err("a worker joined under the name 0.0.0.0".into());
    };
    assert!(matches!(refused, ServeError::Advertise { .. }), "{refused}");
    // A worker of TLS joins under an https:// name.
    let worker = joined(worker_options(&master, ANY_PORT, Some(&tls))?).await?;
    until_workers(&db, &[format!("https://{} up", worker.local_addr())]).await?;
    // Neither process answers a call without TLS.
    let join = "/widesql.cluster.Cluster/Join";
    let info = "/worker.WorkerService/GetWorkerInfo";
    for (addr, path) in [(master.local_addr(), join), (worker.local_addr(), info)] {
        // Taken, the call would end as the service ends it (the join is
        // refused for naming no worker, the information given).
        let answer = call(addr, path, Some(SECRET))
            .await
            .map_err(|e| e.to_string());
        assert!(
            !matches!(answer, Ok(Code::Ok | Code::InvalidArgument)),
            "{path} was taken without TLS: {answer:?}"
        );
    }
    worker.shutdown().await?;
    master.shutdown().await?;
    // A worker of TLS cannot join a master without it.
    let (_dir, _db, plain) = self::master().await?;
    match joined(worker_options(&plain, ANY_PORT, Some(&tls))?).await {
        Err(ServeError::Join { status, .. }) => {
            assert_eq!(status.code(), Code::Unavailable, "{status}");
            assert!(status.message().contains(hint), "{status}");
        }
        Err(other) => return Err(format!("refused for another reason: {other}").into()),
        Ok(_) => return Err("a worker of TLS joined a master without it".into()),
    }
    plain.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn processes_that_advertise_a_host_are_reached_at_it() -> Result<(), BoxError> {
    let dirs = [tempfile::tempdir()?, tempfile::tempdir()?];
    let db = Db::open(dirs[0].path())?;
    let options = ServeOptions {
        listen: "127.0.0.1:0".parse()?,
        master: Some(MasterOptions {
            heartbeat: Duration::from_millis(50),
            advertise: Some("localhost".into()),
            ..MasterOptions::new(secret(SECRET)?)
        }),
        ..ServeOptions::default()
    };
    let master = Server::start(db.clone(), options).await?;
    let worker_db = Db::open(dirs[1].path())?;
    let worker = WorkerServer::start(
        worker_db.clone(),
        WorkerOptions {
            listen: ANY_PORT,
            advertise: Some("localhost".into()),
            master: master.local_addr().to_string(),
            secret: secret(SECRET)?,
            tls: None,
            tls_ca: None,
            insecure: false,
        },
    )
    .await?;
    // It is named, and reached, by the host it gave.
    let name = format!("http://localhost:{}", worker.local_addr().port());
    until_workers(&db, &[format!("{name} up")]).await?;
    let session = db.session();
    session
        .run(&format!(
            "CREATE TABLE t (_key VARCHAR PRIMARY KEY, v BIGINT); \
             INSERT INTO t VALUES ('a', 1), ('b', 2); \
             ALTER TABLE t MOVE TABLET TO '{name}'; \
             INSERT INTO t VALUES ('c', 3)"
        ))
        .await?;
    // The master's own copy goes, so the rows can only come from the
    // worker.
    widesql::internals::remove_moved_away(&db)?;
    let table = db.open_table("default", "public", "t")?.id();
    assert_eq!(widesql::internals::stored_entries(&db, table)?, 0);
    let batches = session
        .sql("SELECT count(*), sum(v) FROM t")
        .await?
        .collect()
        .await?;
    let row = (
        array_value_to_string(batches[0].column(0), 0)?,
        array_value_to_string(batches[0].column(1), 0)?,
    );
    assert_eq!(row, ("3".to_string(), "6".to_string()));
    worker.shutdown().await?;
    master.shutdown().await?;
    Ok(())
}

/// A tree name of a user table: `t:` and a table id's 16 bytes.
fn table_tree() -> Vec<u8> {
    let mut name = b"t:".to_vec();
    name.extend_from_slice(uuid::Uuid::now_v7().as_bytes());
    name
}

/// Every entry of `tree` in `(lo, hi)`, as `key=value` text.
fn entries(
    tree: &dyn widesql::internals::BackendTree,
    lo: std::ops::Bound<Vec<u8>>,
    hi: std::ops::Bound<Vec<u8>>,
    reverse: bool,
) -> Result<Vec<String>, BoxError> {
    tree.range(lo, hi, reverse)
        .map(|entry| {
            let (k, v) = entry?;
            Ok(format!(
                "{}={}",
                String::from_utf8_lossy(&k),
                String::from_utf8_lossy(&v)
            ))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_master_reads_and_writes_the_tablet_data_a_worker_holds() -> Result<(), BoxError> {
    use std::ops::Bound;
    use widesql::internals::{Backend, Bytes, Write};
    let (_dir, _db, master) = master().await?;
    let dir = tempfile::tempdir()?;
    let worker_db = Db::open(dir.path())?;
    let worker = worker(&worker_db, &master, ANY_PORT, SECRET).await?;
    let url = format!("http://{}", worker.local_addr());
    let store = widesql_server::RemoteStore::new(&url, secret(SECRET)?)?;
    let name = table_tree();
    let tree = store.open_tree(&name)?;
    // Storage calls are synchronous: they run on a blocking thread, as the
    // master's scans and writes do.
    let (store, tree) = tokio::task::spawn_blocking(move || -> Result<_, BoxError> {
        // More entries than one chunk of a scan carries.
        let writes: Vec<Write> = (0..2500)
            .map(|i| {
                Write::Put(
                    Bytes::from(format!("k{i:05}")),
                    Bytes::from(format!("v{i}")),
                )
            })
            .collect();
        store.apply_and_flush(&[(std::sync::Arc::clone(&tree), writes)], true)?;
        let all = entries(tree.as_ref(), Bound::Unbounded, Bound::Unbounded, false)?;
        assert_eq!(all.len(), 2500);
        assert_eq!(all[0], "k00000=v0");
        assert_eq!(all[2499], "k02499=v2499");
        let last = entries(tree.as_ref(), Bound::Unbounded, Bound::Unbounded, true)?;
        assert_eq!(last[0], "k02499=v2499");
        assert_eq!(
            entries(
                tree.as_ref(),
                Bound::Excluded(b"k00010".to_vec()),
                Bound::Included(b"k00012".to_vec()),
                false
            )?,
            ["k00011=v11", "k00012=v12"]
        );
        assert_eq!(
            tree.get(b"k00007")?.map(|v| v.to_vec()),
            Some(b"v7".to_vec())
        );
        assert_eq!(tree.get(b"nothing")?, None);
        store.apply(&[(
            std::sync::Arc::clone(&tree),
            vec![Write::Delete(Bytes::from("k00007"))],
        )])?;
        assert_eq!(tree.get(b"k00007")?, None);
        Ok((store, tree))
    })
    .await??;
    // The worker keeps them in its own database, under the same tree name.
    let held: Vec<_> = widesql::internals::held_entries(
        &worker_db,
        &name,
        Bound::Unbounded,
        Bound::Unbounded,
        false,
    )?
    .collect::<Result<_, _>>()?;
    assert_eq!(held.len(), 2499);

    // Only tables' trees: never the worker's own catalog.
    let catalog = store.open_tree(b"_catalog")?;
    let refused = tokio::task::spawn_blocking(move || {
        catalog
            .range(Bound::Unbounded, Bound::Unbounded, false)
            .next()
            .map(|entry| entry.map(|_| ()))
    })
    .await?;
    let refused = refused.ok_or("a scan of the catalog answered nothing")?;
    assert!(
        refused
            .as_ref()
            .is_err_and(|e| e.to_string().contains("not the tree of a table")),
        "{refused:?}"
    );

    // A worker that stopped: its calls fail at once, naming it.
    worker.shutdown().await?;
    let failed = tokio::task::spawn_blocking(move || {
        let scanned = tree.get(b"k00001").map(|_| ());
        let written = store.apply(&[(tree, vec![Write::Delete(Bytes::from("k00001"))])]);
        (scanned, written)
    })
    .await?;
    for result in [failed.0, failed.1] {
        let error = result.expect_err("a stopped worker answers nothing");
        assert!(
            error.to_string().starts_with(&format!("worker {url}: ")),
            "{error}"
        );
    }
    master.shutdown().await?;
    Ok(())
}
