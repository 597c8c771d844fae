//! The door every call passes before its message is read: tonic reads a
//! request's whole message (and sets aside room for the size its header
//! claims, up to the message limit) before the call's handler runs, so a
//! check there would come after a client without credentials had made the
//! server hold that memory. [`SignedIn`] refuses such a call from its
//! headers alone.

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

/// A service whose calls, the handshake aside, are refused with
/// `UNAUTHENTICATED` unless their token is one of a session's (or the
/// database has no users and they carry none), before their message is
/// read. Each call's handler checks the token again, as it always did.
#[derive(Clone)]
pub(crate) struct SignedIn<S> {
    inner: S,
    sessions: Arc<Sessions>,
}

impl<S> SignedIn<S> {
    pub(crate) fn new(inner: S, sessions: Arc<Sessions>) -> Self {
        SignedIn { inner, sessions }
    }
}

impl<S> Service<http::Request<Body>> for SignedIn<S>
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
        if request.uri().path() != HANDSHAKE {
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
            if let Err(status) = self.sessions.caller(&headers) {
                return Either::Right(std::future::ready(Ok(status.into_http())));
            }
        }
        Either::Left(self.inner.call(request))
    }
}

impl<S: NamedService> NamedService for SignedIn<S> {
    const NAME: &'static str = S::NAME;
}
