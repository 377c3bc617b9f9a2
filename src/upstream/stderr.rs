//! Forwards an upstream process's stderr into our logs, line by line, with bounds: a logged line is at most
//! [`MAX_LINE_BYTES`] (1 KiB, the cut marked `…`), and a token bucket lets a burst of [`BURST_LINES`] through and then
//! [`LINES_PER_SECOND`], so a chatty or hostile server cannot flood the logs. Lines over the rate are counted and
//! reported as one summary line. The pipe is always drained (a server blocked on a full stderr pipe would hang), and
//! nothing goes to our stdout.
//!
//! Every value of the server's settings is masked in every line ([`Masks`], contract section 13): each value of its
//! `env` (whatever the variable's name), of the variables it inherits, and of its OAuth settings. A line is masked
//! before it is cut, and enough of it is read for that, so a value the cut would split is masked whole, never shown
//! in part. The last non-empty line and the most telling one (an error code, an error line, over npm's and pip's
//! trailing boilerplate) are kept in a [`LastLine`], so that a start that fails can say why.

use std::sync::{Arc, Mutex};

use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};
use tokio::time::Instant;

use super::lock;

/// The longest stderr line that is logged, in bytes, the `…` that marks a cut included.
pub(crate) const MAX_LINE_BYTES: usize = 1024;
/// Lines logged at once before the rate applies.
pub(crate) const BURST_LINES: f64 = 200.0;
/// Lines logged per second after a burst.
pub(crate) const LINES_PER_SECOND: f64 = 50.0;
/// Values shorter than this (in characters) are not masked: masking `1` or `on` would mask half of every line and
/// protect nothing.
pub(crate) const MIN_MASKED_CHARS: usize = 4;

const CUT_MARK: char = '…';

/// What a process wrote on stderr that best says why it failed (masked): its most telling line, or else its last
/// non-empty one (contract 15: npm and pip end with boilerplate such as "A complete log of this run can be found in
/// ..." three lines under the cause).
#[derive(Debug, Default)]
pub(crate) struct LastLine(Mutex<Lines>);

#[derive(Debug, Default)]
struct Lines {
    last: Option<String>,
    /// The most telling line so far and how telling it is ([`telling`]).
    telling: Option<(u8, String)>,
}

impl LastLine {
    /// The line to show, and whether it is the last one: the most telling line, or else the last.
    pub fn get(&self) -> Option<(String, bool)> {
        let lines = lock(&self.0);
        let last = lines.last.as_ref()?;
        Some(match &lines.telling {
            Some((_, line)) => (line.clone(), line == last),
            None => (last.clone(), true),
        })
    }

    fn saw(&self, line: &str) {
        let mut lines = lock(&self.0);
        lines.last = Some(line.to_string());
        let rank = telling(line);
        // The first of the most telling kind: an error code comes before the lines that repeat it.
        if rank > 0 && lines.telling.as_ref().is_none_or(|(best, _)| rank > *best) {
            lines.telling = Some((rank, line.to_string()));
        }
    }
}

/// How much a stderr line says about a failure: 3 for an error code (`npm error code E…`, `npm ERR! code …`, a
/// certificate error by name), 2 for an error line (`Error:`, `ERR!`, `error:`, `Traceback`'s last line), 0 for the
/// rest (boilerplate such as npm's "A complete log of this run can be found in").
fn telling(line: &str) -> u8 {
    let lower = line.to_ascii_lowercase();
    if lower.contains("complete log of this run") || lower.contains("npm notice") {
        return 0;
    }
    if lower.contains("error code") || lower.contains("err! code") || is_certificate_problem(line) {
        return 3;
    }
    if line.contains("Error:") || line.contains("ERR!") || lower.contains("error:") || lower.starts_with("npm error") {
        return 2;
    }
    0
}

/// Whether a line names a TLS certificate problem (a TLS-inspecting proxy, a private CA): Node's and OpenSSL's codes
/// and Python's `CERTIFICATE_VERIFY_FAILED`.
pub(crate) fn is_certificate_problem(line: &str) -> bool {
    const CODES: [&str; 6] = [
        "SELF_SIGNED_CERT_IN_CHAIN",
        "UNABLE_TO_GET_ISSUER_CERT_LOCALLY",
        "UNABLE_TO_VERIFY_LEAF_SIGNATURE",
        "DEPTH_ZERO_SELF_SIGNED_CERT",
        "CERTIFICATE_VERIFY_FAILED",
        "self-signed certificate in certificate chain",
    ];
    CODES.iter().any(|code| line.contains(code))
}

/// The values masked in one server's stderr lines, longest first, so that a value containing another is masked whole.
#[derive(Debug, Default)]
pub(crate) struct Masks(Vec<String>);

impl Masks {
    /// The values of at least [`MIN_MASKED_CHARS`] characters among `values`, without repeats.
    pub fn new(values: impl IntoIterator<Item = String>) -> Masks {
        let mut values: Vec<String> =
            values.into_iter().filter(|value| value.chars().nth(MIN_MASKED_CHARS - 1).is_some()).collect();
        values.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
        values.dedup();
        Masks(values)
    }

    /// The length in bytes of the longest value: how much of a line past the cut must be read to mask it whole.
    fn longest(&self) -> usize {
        self.0.first().map_or(0, String::len)
    }

    /// `line` with every value replaced by its masked form.
    pub fn apply(&self, line: &str) -> String {
        let mut masked = line.to_string();
        for value in &self.0 {
            if masked.contains(value.as_str()) {
                masked = masked.replace(value.as_str(), &crate::secrets::mask(value));
            }
        }
        masked
    }

    /// A line as it is logged: masked, then cut to [`MAX_LINE_BYTES`] on a character boundary; `cut` says the
    /// reader already left out the end of the line.
    fn logged(&self, line: &str, cut: bool) -> String {
        let mut text = self.apply(line);
        if cut || text.len() > MAX_LINE_BYTES {
            let keep = text.floor_char_boundary(MAX_LINE_BYTES - CUT_MARK.len_utf8());
            text.truncate(keep);
            text.push(CUT_MARK);
        }
        text
    }
}

/// Reads `stderr` until it ends, logging each line (masked and cut) under the server's name and process id.
pub(crate) async fn forward(
    stderr: impl AsyncRead + Unpin,
    server: &str,
    pid: u32,
    masks: &Masks,
    last: &Arc<LastLine>,
) {
    // A value that starts before the cut ends before this, so it is read whole and masked.
    let mut lines = BoundedLines::new(stderr, MAX_LINE_BYTES + masks.longest());
    let mut bucket = TokenBucket::new(BURST_LINES, LINES_PER_SECOND, Instant::now());
    let mut suppressed: u64 = 0;
    while let Some((line, cut)) = lines.next_line().await {
        let line = masks.logged(&line, cut);
        if !line.trim().is_empty() {
            last.saw(&line);
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

/// Lines of a stream, each cut to `limit` bytes without buffering the rest.
struct BoundedLines<R> {
    read: BufReader<R>,
    line: Vec<u8>,
    limit: usize,
}

impl<R: AsyncRead + Unpin> BoundedLines<R> {
    fn new(read: R, limit: usize) -> Self {
        BoundedLines { read: BufReader::new(read), line: Vec::with_capacity(256), limit }
    }

    /// The next line as text (lossy UTF-8) and whether its end was left out, or `None` at the end of the stream.
    async fn next_line(&mut self) -> Option<(String, bool)> {
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
            let room = self.limit.saturating_sub(self.line.len());
            cut |= chunk.len() > room;
            self.line.extend_from_slice(&chunk[..chunk.len().min(room)]);
            let consumed = newline.map_or(available.len(), |at| at + 1);
            self.read.consume(consumed);
            if newline.is_some() {
                return Some(self.text(cut));
            }
        }
    }

    fn text(&self, cut: bool) -> (String, bool) {
        let line = self.line.strip_suffix(b"\r").unwrap_or(&self.line);
        (String::from_utf8_lossy(line).into_owned(), cut)
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

    async fn lines_of(input: &[u8], limit: usize) -> Vec<(String, bool)> {
        let mut lines = BoundedLines::new(input, limit);
        let mut out = Vec::new();
        while let Some(line) = lines.next_line().await {
            out.push(line);
        }
        out
    }

    fn masks(values: &[&str]) -> Masks {
        Masks::new(values.iter().map(|value| value.to_string()))
    }

    #[tokio::test]
    async fn splits_lines_and_keeps_an_unterminated_last_line() {
        let lines: Vec<String> = lines_of(b"one\r\ntwo\n\nthree", 64).await.into_iter().map(|(line, _)| line).collect();
        assert_eq!(lines, vec!["one", "two", "", "three"]);
    }

    #[tokio::test]
    async fn reads_at_most_the_limit_of_a_line_and_says_so() {
        let mut input = vec![b'a'; 100 * 1024];
        input.extend_from_slice(b"\nnext\n");
        let lines = lines_of(&input, 1500).await;
        assert_eq!(lines.len(), 2);
        assert_eq!((lines[0].0.len(), lines[0].1), (1500, true));
        assert_eq!(lines[1], ("next".to_string(), false));
    }

    #[test]
    fn logged_lines_are_at_most_one_kib_and_cut_on_a_character_boundary() {
        let none = Masks::default();
        let long = "é".repeat(MAX_LINE_BYTES);
        let logged = none.logged(&long, true);
        assert!(logged.len() <= MAX_LINE_BYTES && logged.ends_with(CUT_MARK), "{} bytes", logged.len());
        assert!(logged.len() > MAX_LINE_BYTES - 8);
        assert_eq!(none.logged("short", false), "short");
        assert_eq!(none.logged("short", true), "short…", "a line the reader cut is marked");
    }

    #[test]
    fn every_value_is_masked_whatever_its_name_and_short_ones_are_not() {
        let masks = masks(&["plain-value-0123456789", "client-id-abcdefghij", "abc", "four"]);
        let line = masks.apply("got plain-value-0123456789 as client-id-abcdefghij; abc four");
        assert_eq!(line, "got plai**** as clie****; abc ********");
    }

    #[test]
    fn a_value_containing_another_is_masked_whole() {
        let masks = masks(&["token", "token-0123456789abcdef"]);
        assert_eq!(masks.apply("x token-0123456789abcdef y token"), "x toke**** y ********");
    }

    #[test]
    fn a_value_across_the_cut_is_masked_not_shown_in_part() {
        let secret = "SECRETVALUE-0123456789abcdefghijklmnopqrstuvwxyz";
        let masks = masks(&[secret]);
        for start in [MAX_LINE_BYTES - 40, MAX_LINE_BYTES - 10, MAX_LINE_BYTES - 3, MAX_LINE_BYTES] {
            let line = format!("{}{secret}{}", "x".repeat(start), "y".repeat(2000));
            let read: String = line.chars().take(MAX_LINE_BYTES + masks.longest()).collect();
            let logged = masks.logged(&read, true);
            assert!(logged.len() <= MAX_LINE_BYTES, "{}", logged.len());
            assert!(!logged.contains("VALUE-0"), "a part of the value shows at {start}: {logged}");
        }
    }

    #[tokio::test]
    async fn values_are_masked_and_the_last_line_is_kept() {
        let last = Arc::new(LastLine::default());
        let masks = masks(&["sk-live-0123456789abcdef"]);
        forward(&b"starting\nbad token sk-live-0123456789abcdef\n\n"[..], "s", 1, &masks, &last).await;
        assert_eq!(last.get(), Some(("bad token sk-l****".to_string(), true)));
    }

    #[tokio::test]
    async fn the_most_telling_line_wins_over_npms_trailing_boilerplate() {
        let last = Arc::new(LastLine::default());
        let npm = "npm error code SELF_SIGNED_CERT_IN_CHAIN\nnpm error errno SELF_SIGNED_CERT_IN_CHAIN\n\
                   npm error request to https://registry.npmjs.org/x failed, reason: self-signed certificate in \
                   certificate chain\nnpm error A complete log of this run can be found in: /root/.npm/_logs/x.log\n";
        forward(npm.as_bytes(), "s", 1, &Masks::default(), &last).await;
        let (line, is_last) = last.get().expect("a line");
        assert_eq!(line, "npm error code SELF_SIGNED_CERT_IN_CHAIN");
        assert!(!is_last);
        assert!(is_certificate_problem(&line));
        let pip = "Collecting mcp-server-time\nERROR: Could not find a version that satisfies the requirement x\n\
                   [notice] A new release of pip is available\n";
        let last = Arc::new(LastLine::default());
        forward(pip.as_bytes(), "s", 1, &Masks::default(), &last).await;
        assert_eq!(
            last.get().map(|l| l.0).as_deref(),
            Some("ERROR: Could not find a version that satisfies the requirement x")
        );
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
