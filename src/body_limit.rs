//! Reading a request body with a size limit, the way clients expect to be refused.
//!
//! A server that answers 413 and closes the connection while the client is still sending makes most clients report a
//! broken connection instead of the 413. So once a body is over the limit, the rest of it is read and thrown away, up
//! to [`DRAIN_CAP`] more bytes, before the refusal is sent; a body larger than that is cut off (the connection closes),
//! so a client cannot make the server read forever.

use axum::body::{Body, Bytes};
use http_body_util::BodyExt;

/// How much of an oversized body is read and discarded so the client sees the refusal.
pub const DRAIN_CAP: usize = 16 * 1024 * 1024;

/// Why a body was not read.
#[derive(Debug, PartialEq, Eq)]
pub enum BodyError {
    /// Over the limit (the body was drained up to [`DRAIN_CAP`]).
    TooLarge,
    /// The body could not be read.
    Read(String),
    /// The client did not send the whole body in time.
    TimedOut,
}

/// [`read_limited`] within `deadline`: a client that sends its body too slowly is cut off.
pub async fn read_limited_within(body: Body, limit: usize, deadline: std::time::Duration) -> Result<Bytes, BodyError> {
    tokio::time::timeout(deadline, read_limited(body, limit)).await.unwrap_or(Err(BodyError::TimedOut))
}

/// Reads `body` whole when it is at most `limit` bytes.
pub async fn read_limited(body: Body, limit: usize) -> Result<Bytes, BodyError> {
    let mut body = body;
    let mut buf: Vec<u8> = Vec::new();
    let mut seen: usize = 0;
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| BodyError::Read(e.to_string()))?;
        let Ok(data) = frame.into_data() else { continue };
        seen = seen.saturating_add(data.len());
        if seen > limit {
            if seen > limit.saturating_add(DRAIN_CAP) {
                return Err(BodyError::TooLarge);
            }
            buf = Vec::new();
            continue;
        }
        buf.extend_from_slice(&data);
    }
    if seen > limit { Err(BodyError::TooLarge) } else { Ok(Bytes::from(buf)) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn limits() {
        assert_eq!(read_limited(Body::from("abc"), 3).await, Ok(Bytes::from("abc")));
        assert_eq!(read_limited(Body::from("abcd"), 3).await, Err(BodyError::TooLarge));
        assert_eq!(read_limited(Body::empty(), 3).await, Ok(Bytes::new()));
    }

    #[tokio::test(start_paused = true)]
    async fn a_body_that_never_ends_times_out() {
        let (_tx, rx) = tokio::sync::mpsc::channel::<Result<axum::body::Bytes, std::io::Error>>(1);
        let body = Body::from_stream(tokio_stream_of(rx));
        let read = read_limited_within(body, 10, std::time::Duration::from_secs(1)).await;
        assert_eq!(read, Err(BodyError::TimedOut));
    }

    fn tokio_stream_of(
        mut rx: tokio::sync::mpsc::Receiver<Result<axum::body::Bytes, std::io::Error>>,
    ) -> impl futures_util::Stream<Item = Result<axum::body::Bytes, std::io::Error>> {
        futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx))
    }
}
