//! Where log records and exported spans go: stderr, in whole lines, with one `write` for all the lines a tokio worker
//! made between two sleeps.
//!
//! Every record used to be a `write(2)` of its own: at INFO a tool call logs two, so two system calls per call on the
//! worker, each an ext4 inode update when stderr is a file (BENCHMARKS.md, "A Python agent's call"). Now:
//!
//! - a runtime worker thread (marked by the runtime's `on_thread_unpark`, see `cli::serve`) appends its lines to one
//!   buffer, which is written when a worker is about to sleep (`on_thread_park`, [`flush`]), when it holds
//!   [`FLUSH_BYTES`], or at the next line once its oldest line is [`FLUSH_AGE`] old. A worker sleeps as soon as it has
//!   nothing to run, so a line waits only for the tasks ready beside it, never for a timer;
//! - any other thread (the main thread, blocking threads, the span exporter's thread) writes at once, the buffer's
//!   lines first, so lines keep the order they were made in;
//! - every write holds the buffer's lock and writes whole lines, so lines from different threads never interleave;
//! - a panic writes the buffer before its message, and `cli::serve` writes it before the process exits.

use std::cell::Cell;
use std::io::{self, Write};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tracing_subscriber::fmt::MakeWriter;

/// A buffer this large is written at once.
pub const FLUSH_BYTES: usize = 64 * 1024;
/// A line is not held longer than this when another line follows it (a worker that runs for that long without
/// sleeping).
pub const FLUSH_AGE: Duration = Duration::from_millis(100);
/// After a larger line, the buffer's memory is given back down to this.
const KEEP_BYTES: usize = 2 * FLUSH_BYTES;

struct Pending {
    text: Vec<u8>,
    /// When the first line of `text` came.
    since: Option<Instant>,
}

static PENDING: Mutex<Pending> = Mutex::new(Pending { text: Vec::new(), since: None });

thread_local! {
    /// Set on the runtime's worker threads: they flush before they sleep, so they may hold lines back until then.
    static DEFERS: Cell<bool> = const { Cell::new(false) };
}

fn pending() -> MutexGuard<'static, Pending> {
    // A panic while the lock was held left whole lines in the buffer (a line is appended in one call).
    PENDING.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Writes the buffer and `more` with one `write_all`, and empties the buffer (its lines are dropped on an error, as a
/// failed write of them would have dropped them before).
fn write_out(pending: &mut Pending, more: &[u8]) -> io::Result<()> {
    pending.since = None;
    let result = if pending.text.is_empty() {
        stderr().write_all(more)
    } else {
        pending.text.extend_from_slice(more);
        stderr().write_all(&pending.text)
    };
    pending.text.clear();
    if pending.text.capacity() > KEEP_BYTES {
        pending.text.shrink_to(KEEP_BYTES / 2);
    }
    result
}

#[cfg(not(test))]
fn stderr() -> impl Write {
    io::stderr().lock()
}

/// The unit tests' lines go nowhere (the harness does not capture a write to stderr itself).
#[cfg(test)]
fn stderr() -> impl Write {
    io::sink()
}

/// Marks the calling thread as a runtime worker, which calls [`flush`] before it sleeps (the runtime's
/// `on_thread_unpark`).
pub fn defer_on_this_thread() {
    DEFERS.set(true);
}

/// Writes the lines held back (the runtime's `on_thread_park` and `on_thread_stop`, the panic hook, the end of
/// `serve`).
pub fn flush() {
    let mut pending = pending();
    if !pending.text.is_empty() {
        let _ = write_out(&mut pending, &[]);
    }
}

/// Writes `lines` (whole lines) now, after the lines held back: what the span exporter's thread writes.
pub fn write_now(lines: &[u8]) -> io::Result<()> {
    write_out(&mut pending(), lines)
}

/// Writes `line` (whole lines), or holds it back on a worker thread.
fn write_line(line: &[u8]) -> io::Result<()> {
    let mut pending = pending();
    if !DEFERS.get() {
        return write_out(&mut pending, line);
    }
    let now = Instant::now();
    let since = *pending.since.get_or_insert(now);
    if pending.text.len() + line.len() >= FLUSH_BYTES || now.duration_since(since) >= FLUSH_AGE {
        return write_out(&mut pending, line);
    }
    pending.text.extend_from_slice(line);
    Ok(())
}

/// Installs a panic hook that writes the lines held back before the panic's message (then runs the hook that was
/// there). It does not wait for the lock: a panic while it is held skips the write rather than waiting forever.
pub fn flush_on_panic() {
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if let Ok(mut pending) = PENDING.try_lock()
            && !pending.text.is_empty()
        {
            let _ = write_out(&mut pending, &[]);
        }
        previous(info);
    }));
}

/// The log formatter's writer: each record arrives as one `write` of its whole line.
#[derive(Clone, Copy, Debug, Default)]
pub struct LogOutput;

impl Write for LogOutput {
    fn write(&mut self, line: &[u8]) -> io::Result<usize> {
        write_line(line)?;
        Ok(line.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for LogOutput {
    type Writer = LogOutput;

    fn make_writer(&'a self) -> LogOutput {
        LogOutput
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The buffer's text, for a test (stderr is the test harness's).
    fn held() -> Vec<u8> {
        pending().text.clone()
    }

    #[test]
    fn a_worker_holds_lines_until_it_flushes_and_other_threads_write_at_once() {
        // One test, because the buffer is the process's.
        std::thread::spawn(|| {
            defer_on_this_thread();
            LogOutput.write_all(b"first line\n").unwrap();
            LogOutput.write_all(b"second line\n").unwrap();
            assert_eq!(held(), b"first line\nsecond line\n");
            flush();
            assert!(held().is_empty());
            // A large line goes at once, with what was held.
            LogOutput.write_all(b"held\n").unwrap();
            LogOutput.write_all(&vec![b'x'; FLUSH_BYTES]).unwrap();
            assert!(held().is_empty());
            // A line older than FLUSH_AGE goes with the next one.
            LogOutput.write_all(b"old\n").unwrap();
            std::thread::sleep(FLUSH_AGE);
            LogOutput.write_all(b"new\n").unwrap();
            assert!(held().is_empty());
            LogOutput.write_all(b"left for another thread\n").unwrap();
        })
        .join()
        .unwrap();
        assert_eq!(held(), b"left for another thread\n");
        // A thread that is not a worker writes what is held, then its own line.
        LogOutput.write_all(b"not a worker\n").unwrap();
        assert!(held().is_empty());
    }
}
