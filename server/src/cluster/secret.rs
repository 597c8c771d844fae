//! The cluster secret: the master and its workers share it (from the
//! `WIDESQL_CLUSTER_SECRET` environment variable), every call between them
//! carries it in a header, and each process's cluster services refuse a
//! call without it before reading its message.

use std::fmt;
use std::sync::Arc;

use tonic::body::Body;

use crate::door::Door;
use crate::ServeError;

/// The environment variable the command line reads the secret from.
pub const SECRET_VARIABLE: &str = "WIDESQL_CLUSTER_SECRET";

/// The header that carries the secret.
pub(crate) const SECRET_HEADER: &str = "x-widesql-cluster-secret";

/// The secret the processes of a cluster share. It is never printed.
#[derive(Clone)]
pub struct ClusterSecret(Arc<http::HeaderValue>);

impl fmt::Debug for ClusterSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ClusterSecret(…)")
    }
}

impl ClusterSecret {
    /// The fewest bytes a secret has: a shorter one could be guessed.
    pub const MIN_BYTES: usize = 16;

    /// A secret of at least [`MIN_BYTES`](Self::MIN_BYTES) visible ASCII
    /// characters (it travels as a header value).
    pub fn new(secret: &str) -> Result<ClusterSecret, ServeError> {
        if secret.len() < Self::MIN_BYTES {
            return Err(ServeError::ClusterSecret(
                "is shorter than 16 characters".into(),
            ));
        }
        if !secret.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(ServeError::ClusterSecret(
                "holds a character other than visible ASCII (no spaces either)".into(),
            ));
        }
        let mut value = http::HeaderValue::from_str(secret)
            .map_err(|e| ServeError::ClusterSecret(e.to_string()))?;
        value.set_sensitive(true);
        Ok(ClusterSecret(Arc::new(value)))
    }

    /// The secret in [`SECRET_VARIABLE`].
    pub fn from_env() -> Result<ClusterSecret, ServeError> {
        match std::env::var(SECRET_VARIABLE) {
            Ok(secret) => ClusterSecret::new(&secret),
            Err(std::env::VarError::NotPresent) => {
                Err(ServeError::ClusterSecret("is not set".into()))
            }
            Err(std::env::VarError::NotUnicode(_)) => Err(ServeError::ClusterSecret(
                "holds a character other than visible ASCII".into(),
            )),
        }
    }

    /// Adds the secret to a call's headers.
    pub(crate) fn add_to(&self, headers: &mut http::HeaderMap) {
        headers.insert(SECRET_HEADER, (*self.0).clone());
    }

    /// Adds the secret to a call's metadata.
    pub(crate) fn add_to_request<T>(&self, request: &mut tonic::Request<T>) {
        let mut headers = std::mem::take(request.metadata_mut()).into_headers();
        self.add_to(&mut headers);
        *request.metadata_mut() = tonic::metadata::MetadataMap::from_headers(headers);
    }

    /// Whether the headers carry this secret, compared in a time that
    /// tells neither how many leading bytes matched nor the secret's
    /// length (every byte of the longer of the two is compared).
    fn carried_by(&self, headers: &http::HeaderMap) -> bool {
        let Some(given) = headers.get(SECRET_HEADER) else {
            return false;
        };
        let (given, ours) = (given.as_bytes(), self.0.as_bytes());
        let longer = given.len().max(ours.len());
        let differences = (0..longer).fold(given.len() ^ ours.len(), |acc, i| {
            let a = given.get(i).copied().unwrap_or(0);
            let b = ours.get(i).copied().unwrap_or(0);
            acc | usize::from(a ^ b)
        });
        differences == 0
    }

    /// `service` behind a door that refuses, with `UNAUTHENTICATED`, every
    /// call that does not carry this secret.
    pub(crate) fn guard<S>(&self, service: S) -> Door<S> {
        self.guard_calls(service, |_| Ok(()))
    }

    /// [`ClusterSecret::guard`], and `also` asked of the calls that carry
    /// the secret.
    pub(crate) fn guard_calls<S>(
        &self,
        service: S,
        also: impl Fn(&http::Request<Body>) -> Result<(), tonic::Status> + Send + Sync + 'static,
    ) -> Door<S> {
        let secret = self.clone();
        Door::new(service, move |request: &http::Request<Body>| {
            if !secret.carried_by(request.headers()) {
                return Err(tonic::Status::unauthenticated(
                    "a call between the processes of a cluster needs the cluster secret \
                     (WIDESQL_CLUSTER_SECRET)",
                ));
            }
            also(request)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_secret_is_long_visible_ascii_and_matches_only_itself() {
        assert!(ClusterSecret::new("short").is_err());
        assert!(ClusterSecret::new("sixteen chars ok").is_err(), "a space");
        assert!(ClusterSecret::new("sixteen-chars-é!").is_err());
        let secret = ClusterSecret::new("sixteen-chars-ok").expect("a secret");
        assert_eq!(format!("{secret:?}"), "ClusterSecret(…)");
        let mut headers = http::HeaderMap::new();
        assert!(!secret.carried_by(&headers));
        secret.add_to(&mut headers);
        assert!(secret.carried_by(&headers));
        for other in ["sixteen-chars-oK", "sixteen-chars-ok!", "sixteen-chars-o"] {
            let mut headers = http::HeaderMap::new();
            headers.insert(SECRET_HEADER, http::HeaderValue::from_static(other));
            assert!(!secret.carried_by(&headers), "{other}");
        }
    }
}
