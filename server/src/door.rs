//! The door every call passes before its message is read: tonic reads a
//! request's whole message (and sets aside room for the size its header
//! claims, up to the message limit) before the call's handler runs, so a
//! check there would come after a caller without credentials had made the
//! server hold that memory. A [`Door`] refuses such a call from its headers
//! alone. Clients pass the door of the Flight SQL service with a session's
//! token ([`signed_in`]); the processes of a cluster pass the doors of the
//! cluster's services with the cluster secret
//! ([`ClusterSecret`](crate::ClusterSecret)).

use std::convert::Infallible;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures::future::Either;
use tonic::body::Body;
use tonic::metadata::MetadataMap;
use tonic::server::NamedService;
use tower_service::Service;

use crate::sessions::Sessions;

/// The one call made before signing in: it reads its credentials from its
/// headers, never its messages.
const HANDSHAKE: &str = "/arrow.flight.protocol.FlightService/Handshake";

/// What a door asks of a call's headers.
type Check = Arc<dyn Fn(&http::Request<Body>) -> Result<(), tonic::Status> + Send + Sync>;

/// A service whose calls are refused with the status `check` returns,
/// before their message is read.
#[derive(Clone)]
pub(crate) struct Door<S> {
    inner: S,
    check: Check,
}

impl<S> Door<S> {
    pub(crate) fn new(
        inner: S,
        check: impl Fn(&http::Request<Body>) -> Result<(), tonic::Status> + Send + Sync + 'static,
    ) -> Self {
        Door {
            inner,
            check: Arc::new(check),
        }
    }
}

/// The Flight SQL service behind a door that refuses every call but the
/// handshake with `UNAUTHENTICATED` unless its token is one of a session's
/// (or the database has no users and it carries none). Each call's handler
/// checks the token again, as it always did.
pub(crate) fn signed_in<S>(inner: S, sessions: Arc<Sessions>) -> Door<S> {
    Door::new(inner, move |request| {
        if request.uri().path() == HANDSHAKE {
            return Ok(());
        }
        // The token is all the check reads: only its header is copied.
        let mut token = http::HeaderMap::new();
        if let Some(value) = request.headers().get(http::header::AUTHORIZATION) {
            token.insert(http::header::AUTHORIZATION, value.clone());
        }
        let headers = tonic::Request::from_parts(
            MetadataMap::from_headers(token),
            tonic::Extensions::default(),
            (),
        );
        sessions.caller(&headers).map(|_| ())
    })
}

impl<S> Service<http::Request<Body>> for Door<S>
where
    S: Service<http::Request<Body>, Response = http::Response<Body>, Error = Infallible>,
{
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = Either<S::Future, std::future::Ready<Result<Self::Response, Infallible>>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<Body>) -> Self::Future {
        match (self.check)(&request) {
            Ok(()) => Either::Left(self.inner.call(request)),
            Err(status) => Either::Right(std::future::ready(Ok(status.into_http()))),
        }
    }
}

impl<S: NamedService> NamedService for Door<S> {
    const NAME: &'static str = S::NAME;
}
