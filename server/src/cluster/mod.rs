//! A cluster: one master and worker processes (`widesql serve --master`,
//! `widesql serve --worker --join MASTER`).
//!
//! The master is the [`Server`](crate::Server) clients call: it owns the
//! catalog, the tablet map among it, and serves Flight SQL. Beside it, it
//! serves the cluster's own service ([`protocol`]), which workers call to
//! join and then every heartbeat; `SHOW WORKERS` lists them. A worker
//! ([`worker`]) owns a database directory of its own and serves
//! datafusion-distributed's worker service and the tablet data it holds
//! ([`data`]), which the master reaches as a storage backend. A master's
//! queries run on its workers where their tablets are ([`reads`]). Every
//! call between the
//! processes carries the secret they share ([`secret`]), and each
//! process's cluster services refuse a call without it before reading its
//! message. A cluster whose processes serve TLS makes every call between
//! them over TLS ([`peers`]).

mod data;
mod peers;
mod protocol;
mod reads;
mod remote;
mod secret;
mod task_settings;
mod worker;

use std::time::Duration;

pub(crate) use peers::Peers;
pub(crate) use protocol::ClusterService;
pub(crate) use reads::{distribute_queries, refuse_plans, worker_service};
pub(crate) use remote::MasterStores;
pub use remote::{hold_back_applies_to, send_held_back_apply, RemoteStore};
pub use secret::{ClusterSecret, SECRET_VARIABLE};
pub use worker::{WorkerOptions, WorkerServer};

/// What makes a [`Server`](crate::Server) a cluster's master.
#[derive(Clone, Debug)]
pub struct MasterOptions {
    /// The secret the cluster shares.
    pub secret: ClusterSecret,
    /// How often workers call; one not heard from for three beats is down.
    pub heartbeat: Duration,
    /// The host (a name or an address) the workers reach this master at,
    /// on the port it listens on; `None`: the address it listens on,
    /// which must then not be an unspecified one (`0.0.0.0`, `::`).
    pub advertise: Option<String>,
    /// The certificates (PEM) the master trusts in its workers' answers,
    /// such as the CA that signed their certificates: needed exactly when
    /// the server serves TLS. Its workers then serve TLS too, and every
    /// call between the processes goes over TLS.
    pub tls_ca: Option<Vec<u8>>,
}

impl MasterOptions {
    /// A master of the cluster that shares `secret`, with a heartbeat of
    /// one second.
    pub fn new(secret: ClusterSecret) -> Self {
        MasterOptions {
            secret,
            heartbeat: Duration::from_secs(1),
            advertise: None,
            tls_ca: None,
        }
    }
}

/// The URL the other processes of a cluster (`peers`) reach a process at
/// that listens on `addr` and calls itself `advertise` (a host name or an
/// address, without a port: the port is the one it listens on). An
/// unspecified address (`0.0.0.0`, `::`) names no host another process can
/// dial, so it needs `advertise`. Its scheme is the cluster's
/// ([`Peers::scheme`]).
pub(crate) fn reachable_url(
    addr: std::net::SocketAddr,
    advertise: Option<&str>,
    peers: &Peers,
) -> Result<String, crate::ServeError> {
    let scheme = peers.scheme();
    let refused = || crate::ServeError::Advertise {
        addr,
        advertise: advertise.map(str::to_string),
    };
    let Some(host) = advertise else {
        return match addr.ip().is_unspecified() {
            true => Err(refused()),
            false => Ok(format!("{scheme}://{addr}")),
        };
    };
    // A host as a URL reads it: `127.1` is 127.0.0.1, `0` is 0.0.0.0, and
    // an IPv6 address goes in brackets; the name is the URL's own form.
    let port = addr.port();
    let bracketed = match host.parse::<std::net::Ipv6Addr>() {
        Ok(_) => format!("[{host}]"),
        Err(_) => host.to_string(),
    };
    let url = url::Url::parse(&format!("http://{bracketed}:{port}")).map_err(|_| refused())?;
    let only_a_host = url.path() == "/"
        && url.query().is_none()
        && url.fragment().is_none()
        && url.username().is_empty()
        && url.password().is_none()
        && url.port() == Some(port);
    let reachable = match url.host() {
        Some(url::Host::Ipv4(ip)) => !ip.is_unspecified(),
        Some(url::Host::Ipv6(ip)) => !ip.is_unspecified(),
        Some(url::Host::Domain(name)) => is_host_name(name),
        None => false,
    };
    match (only_a_host, reachable, url.host_str()) {
        (true, true, Some(host)) => Ok(format!("{scheme}://{host}:{port}")),
        _ => Err(refused()),
    }
}

/// Whether `host` is a DNS name: dot-separated labels (the last may be
/// empty: a trailing dot) of letters, digits, underscores and inner
/// hyphens.
fn is_host_name(host: &str) -> bool {
    let labels = host.strip_suffix('.').unwrap_or(host);
    labels.len() <= 253
        && labels.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        })
}

#[cfg(test)]
mod tests {
    use super::{reachable_url, ClusterSecret, Peers};
    use crate::ServeError;

    #[test]
    fn a_process_is_reached_at_the_host_it_advertises_on_the_port_it_listens_on() {
        let listen = "127.0.0.1:5000".parse().unwrap();
        let plain = Peers::plain(ClusterSecret::new("sixteen-chars-ok").unwrap());
        let url = |host| reachable_url(listen, host, &plain).map_err(|e| e.to_string());
        assert_eq!(url(None).unwrap(), "http://127.0.0.1:5000");
        // In a cluster that encrypts its calls, over TLS.
        let pem = rcgen::generate_simple_self_signed(vec!["db1".into()])
            .unwrap()
            .cert
            .pem();
        let secret = ClusterSecret::new("sixteen-chars-ok").unwrap();
        let encrypted = Peers::new(secret, true, Some(pem.as_bytes())).unwrap();
        assert_eq!(
            reachable_url(listen, Some("db1"), &encrypted).unwrap(),
            "https://db1:5000"
        );
        assert_eq!(
            url(Some("db1.example.com")).unwrap(),
            "http://db1.example.com:5000"
        );
        assert_eq!(url(Some("10.0.0.5")).unwrap(), "http://10.0.0.5:5000");
        assert_eq!(url(Some("::1")).unwrap(), "http://[::1]:5000");
        assert_eq!(url(Some("[::1]")).unwrap(), "http://[::1]:5000");
        // Written another way, an address is named as a URL reads it.
        assert_eq!(url(Some("127.1")).unwrap(), "http://127.0.0.1:5000");
        assert_eq!(
            url(Some("DB1.Example.com.")).unwrap(),
            "http://db1.example.com.:5000"
        );
        assert_eq!(url(Some("db_1")).unwrap(), "http://db_1:5000");
        for host in [
            "0.0.0.0",
            "0",
            "::",
            "[::]",
            "db1:5000",
            "http://db1",
            "a/b",
            "",
            "-db1",
            "a..b",
            "u@db1",
            "db1?x",
            "fe80::1%eth0",
        ] {
            let error = url(Some(host)).expect_err(host);
            assert!(
                error.contains("is not a host name or address"),
                "{host}: {error}"
            );
        }
        for anywhere in ["0.0.0.0:5000", "[::]:5000"] {
            let error = reachable_url(anywhere.parse().unwrap(), None, &plain).unwrap_err();
            assert!(matches!(error, ServeError::Advertise { .. }), "{error}");
            assert!(
                error.to_string().contains("give --advertise HOST"),
                "{error}"
            );
            // Given a host, it is reached there.
            let url = reachable_url(anywhere.parse().unwrap(), Some("db1"), &plain).unwrap();
            assert_eq!(url, "http://db1:5000");
        }
    }
}
