//! How the processes of a cluster call each other: every call carries the
//! cluster secret, and in a cluster whose processes serve TLS every call
//! goes over TLS, checking the answering process's certificate against the
//! certificates this one trusts (`--tls-ca`). A process is named by the URL
//! it is called at, so the scheme of a name says how it is called:
//! `https://` in a cluster that encrypts its calls, `http://` in one that
//! does not. No process calls the other kind.

use tonic::transport::{Certificate, ClientTlsConfig, Endpoint};

use super::ClusterSecret;
use crate::ServeError;

/// How a process calls the other processes of its cluster.
#[derive(Clone, Debug)]
pub(crate) struct Peers {
    pub(crate) secret: ClusterSecret,
    /// The certificates trusted in the other processes' answers; `Some`
    /// exactly when the cluster encrypts its calls.
    trusted: Option<Certificate>,
}

impl Peers {
    /// The peers of a process that shares `secret`, and that serves TLS
    /// (`serves_tls`) trusting the PEM certificates `trusted`. A process
    /// serves TLS exactly when it trusts certificates: one that serves
    /// TLS calls the others over TLS, and one that does not is called
    /// without it.
    pub(crate) fn new(
        secret: ClusterSecret,
        serves_tls: bool,
        trusted: Option<&[u8]>,
    ) -> Result<Peers, ServeError> {
        let trusted =
            match (serves_tls, trusted) {
                (false, None) => None,
                (true, Some(pem)) if holds_a_certificate(pem) => Some(Certificate::from_pem(pem)),
                (true, Some(_)) => {
                    return Err(ServeError::ClusterTls(
                        "the certificates to trust (--tls-ca) hold no PEM certificate",
                    ))
                }
                (true, None) => return Err(ServeError::ClusterTls(
                    "a process of a cluster that serves TLS calls the others over TLS: give the \
                     certificates it trusts in their answers (--tls-ca), such as the CA that \
                     signed their certificates",
                )),
                (false, Some(_)) => {
                    return Err(ServeError::ClusterTls(
                        "the certificates to trust (--tls-ca) are for a cluster whose processes \
                     serve TLS: give --tls-cert and --tls-key too",
                    ))
                }
            };
        Ok(Peers { secret, trusted })
    }

    /// The peers of a process of a cluster that does not encrypt its
    /// calls.
    pub(crate) fn plain(secret: ClusterSecret) -> Peers {
        Peers {
            secret,
            trusted: None,
        }
    }

    /// Whether the cluster encrypts its calls.
    pub(crate) fn encrypted(&self) -> bool {
        self.trusted.is_some()
    }

    /// The scheme of the URLs the processes of this cluster are named by.
    pub(crate) fn scheme(&self) -> &'static str {
        match self.encrypted() {
            true => "https",
            false => "http",
        }
    }

    /// Where the process named `url` is called: over TLS in a cluster that
    /// encrypts its calls. A name of the other scheme is refused, so that
    /// no call of an encrypted cluster goes in the clear.
    pub(crate) fn endpoint(&self, url: &str) -> Result<Endpoint, String> {
        let endpoint = Endpoint::from_shared(url.to_string())
            .map_err(|e| format!("'{url}' is not an address: {e}"))?;
        let scheme = endpoint.uri().scheme_str().unwrap_or_default().to_string();
        if scheme != self.scheme() {
            return Err(format!(
                "'{url}' is not called: the processes of this cluster are reached at {}:// \
                 addresses (a cluster's processes serve TLS all or none)",
                self.scheme()
            ));
        }
        match &self.trusted {
            Some(trusted) => endpoint
                .tls_config(ClientTlsConfig::new().ca_certificate(trusted.clone()))
                .map_err(|e| format!("'{url}' cannot be called over TLS: {e}")),
            None => Ok(endpoint),
        }
    }
}

/// Whether `pem` holds at least one PEM certificate.
fn holds_a_certificate(pem: &[u8]) -> bool {
    pem.windows(27).any(|w| w == b"-----BEGIN CERTIFICATE-----")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secret() -> ClusterSecret {
        ClusterSecret::new("sixteen-chars-ok").unwrap()
    }

    #[test]
    fn a_process_that_serves_tls_calls_only_over_tls_and_needs_certificates_to_trust() {
        let pem = rcgen::generate_simple_self_signed(vec!["localhost".into()])
            .unwrap()
            .cert
            .pem();
        let encrypted = Peers::new(secret(), true, Some(pem.as_bytes())).unwrap();
        assert_eq!(encrypted.scheme(), "https");
        assert!(encrypted.endpoint("https://localhost:7001").is_ok());
        let refused = encrypted.endpoint("http://localhost:7001").unwrap_err();
        assert!(refused.contains("https:// addresses"), "{refused}");
        let plain = Peers::new(secret(), false, None).unwrap();
        assert_eq!(plain.scheme(), "http");
        assert!(plain.endpoint("http://localhost:7001").is_ok());
        let refused = plain.endpoint("https://localhost:7001").unwrap_err();
        assert!(refused.contains("http:// addresses"), "{refused}");
        for (serves_tls, trusted, expected) in [
            (true, None, "give the certificates it trusts"),
            (
                false,
                Some(pem.as_bytes()),
                "give --tls-cert and --tls-key too",
            ),
            (
                true,
                Some(&b"not a certificate"[..]),
                "hold no PEM certificate",
            ),
        ] {
            let error = Peers::new(secret(), serves_tls, trusted).unwrap_err();
            assert!(error.to_string().contains(expected), "{error}");
        }
    }
}
