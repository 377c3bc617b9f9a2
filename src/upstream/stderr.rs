//! Forwards an upstream process's stderr into our logs, line by line, with bounds: a line is cut at
//! [`MAX_LINE_BYTES`], and a token bucket lets a burst of [`BURST_LINES`] through and then [`LINES_PER_SECOND`], so a
//! chatty or hostile server cannot flood the logs. Lines over the rate are counted and reported as one summary line.
//! The pipe is always drained (a server blocked on a full stderr pipe would hang), and nothing goes to our stdout.
//! Values of the server's secret environment variables are masked in every line (spec 5.2.5), and the last non-empty
//! line is kept in a [`LastLine`], so that a start that fails can say what the server said last.

use std::sync::{Arc, Mutex};

use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};
use tokio::time::Instant;

use super::lock;

/// The longest part of one stderr line that is logged.
pub(crate) const MAX_LINE_BYTES: usize = 2048;
/// Lines logged at once before the rate applies.
pub(crate) const BURST_LINES: f64 = 200.0;
/// Lines logged per second after a burst.
pub(crate) const LINES_PER_SECOND: f64 = 50.0;

/// The last non-empty line a process wrote on stderr, masked.
#[derive(Debug, Default)]
pub(crate) struct LastLine(Mutex<Option<String>>);

impl LastLine {
    pub fn get(&self) -> Option<String> {
        lock(&self.0).clone()
    }
}

/// `line` with every secret replaced by its masked form.
pub(crate) fn mask_secrets(line: &str, secrets: &[String]) -> String {
    let mut masked = line.to_string();
    for secret in secrets {
        if masked.contains(secret.as_str()) {
            masked = masked.replace(secret.as_str(), &crate::secrets::mask(secret));
        }
    }
    masked
}

/// Reads `stderr` until it ends, logging each line (secrets masked) under the server's name and process id.
pub(crate) async fn forward(
    stderr: impl AsyncRead + Unpin,
    server: &str,
    pid: u32,
    secrets: &[String],
    last: &Arc<LastLine>,
) {
    let mut lines = BoundedLines::new(stderr);
    let mut bucket = TokenBucket::new(BURST_LINES, LINES_PER_SECOND, Instant::now());
    let mut suppressed: u64 = 0;
    while let Some(line) = lines.next_line().await {
        let line = mask_secrets(&line, secrets);
        if !line.trim().is_empty() {
            *lock(&last.0) = Some(line.clone());
        }
        if !bucket.take(Instant::now()) {
            suppressed += 1;
            continue;
        }
        if suppressed > 0 {
            tracing::warn!(server = %server, pid, suppressed, "upstream stderr: lines over the log rate were dropped");
            suppressed = 0;
        }
        tracing::info!(target: "mcpgw::upstream::stderr", server = %server, pid, "{line}");
    }
    if suppressed > 0 {
        tracing::warn!(server = %server, pid, suppressed, "upstream stderr: lines over the log rate were dropped");
    }
}

/// Lines of a stream, each cut to [`MAX_LINE_BYTES`] without buffering the rest.
struct BoundedLines<R> {
    read: BufReader<R>,
    line: Vec<u8>,
}

impl<R: AsyncRead + Unpin> BoundedLines<R> {
    fn new(read: R) -> Self {
        BoundedLines { read: BufReader::new(read), line: Vec::with_capacity(256) }
    }

    /// The next line as text (lossy UTF-8, marked `…` when cut), or `None` at the end of the stream.
    async fn next_line(&mut self) -> Option<String> {
        self.line.clear();
        let mut cut = false;
        loop {
            let available = match self.read.fill_buf().await {
                Ok(bytes) => bytes,
                Err(_) => return None,
            };
            if available.is_empty() {
                return (!self.line.is_empty()).then(|| self.text(cut));
            }
            let newline = available.iter().position(|byte| *byte == b'\n');
            let chunk = &available[..newline.unwrap_or(available.len())];
            let room = MAX_LINE_BYTES.saturating_sub(self.line.len());
            cut |= chunk.len() > room;
            self.line.extend_from_slice(&chunk[..chunk.len().min(room)]);
            let consumed = newline.map_or(available.len(), |at| at + 1);
            self.read.consume(consumed);
            if newline.is_some() {
                return Some(self.text(cut));
            }
        }
    }

    fn text(&self, cut: bool) -> String {
        let line = self.line.strip_suffix(b"\r").unwrap_or(&self.line);
        let mut text = String::from_utf8_lossy(line).into_owned();
        if cut {
            text.push('…');
        }
        text
    }
}

/// A plain token bucket over an explicit clock, so it can be tested without sleeping.
struct TokenBucket {
    tokens: f64,
    capacity: f64,
    per_second: f64,
    last: Instant,
}

impl TokenBucket {
    fn new(capacity: f64, per_second: f64, now: Instant) -> Self {
        TokenBucket { tokens: capacity, capacity, per_second, last: now }
    }

    fn take(&mut self, now: Instant) -> bool {
        let elapsed = now.saturating_duration_since(self.last);
        self.last = now;
        self.tokens = (self.tokens + elapsed.as_secs_f64() * self.per_second).min(self.capacity);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    async fn lines_of(input: &[u8]) -> Vec<String> {
        let mut lines = BoundedLines::new(input);
        let mut out = Vec::new();
        while let Some(line) = lines.next_line().await {
            out.push(line);
        }
        out
    }

    #[tokio::test]
    async fn splits_lines_and_keeps_an_unterminated_last_line() {
        assert_eq!(lines_of(b"one\r\ntwo\n\nthree").await, vec!["one", "two", "", "three"]);
    }

    #[tokio::test]
    async fn cuts_long_lines_and_marks_them() {
        let mut input = vec![b'a'; MAX_LINE_BYTES * 3];
        input.extend_from_slice(b"\nnext\n");
        let lines = lines_of(&input).await;
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[0].len(), MAX_LINE_BYTES + '…'.len_utf8());
        assert!(lines[0].ends_with('…'));
        assert_eq!(lines[1], "next");
    }

    #[tokio::test]
    async fn secrets_are_masked_and_the_last_line_is_kept() {
        let last = Arc::new(LastLine::default());
        let secrets = vec!["sk-live-0123456789abcdef".to_string()];
        forward(&b"starting\nbad token sk-live-0123456789abcdef\n\n"[..], "s", 1, &secrets, &last).await;
        assert_eq!(last.get().as_deref(), Some("bad token sk-l****"));
    }

    #[test]
    fn bucket_allows_a_burst_then_the_rate() {
        let start = Instant::now();
        let mut bucket = TokenBucket::new(3.0, 2.0, start);
        assert!((0..3).all(|_| bucket.take(start)));
        assert!(!bucket.take(start));
        assert!(bucket.take(start + Duration::from_millis(500)));
        assert!(!bucket.take(start + Duration::from_millis(500)));
    }
}
