//! An answer's body that holds something until the body has been sent or dropped: a connection's request in flight
//! (`listener.rs`), a subscription's place under the session limits (`gateway/middleware/sessions.rs`). The body
//! passes through unchanged.

use std::pin::Pin;
use std::task::{Context, Poll};

use axum::body::Body;
use bytes::Bytes;

/// `body`, with `held` dropped when the body is.
pub fn holding<T: Send + Unpin + 'static>(body: Body, held: T) -> Body {
    Body::new(Holding { body, _held: held })
}

struct Holding<T> {
    body: Body,
    _held: T,
}

impl<T: Send + Unpin + 'static> http_body::Body for Holding<T> {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.get_mut().body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}
