//! The stdio front's pump: the client's lines are read here, and rmcp reads them from an in-memory pipe, so that the
//! route of tasks (`tasks.rs`) can take the messages rmcp's types cannot carry. Three tasks:
//!
//! - reading: a line at a time from stdin, bounded as rmcp bounds its own (`DEFAULT_MAX_LINE_LENGTH`: a longer line
//!   is dropped and logged, the connection stays open); each line goes on to rmcp unchanged, unless it is about tasks,
//!   whose answer runs on its own (counted in flight, so that the drain waits for it);
//! - forwarding: rmcp's lines, amended where `tasks.rs` says;
//! - writing: the only writer of stdout, a whole line at a time, so that rmcp's lines and the route's answers never
//!   interleave.
//!
//! A task-augmented call that turns out to be a plain one (its tool offers no task) reaches rmcp once that is known,
//! possibly after lines the client sent later; JSON-RPC answers are matched by id, not by order.
//!
//! The end of stdin ends rmcp's input as it ended before; answers still running get what rmcp gives its own handlers
//! then ([`CLOSING_PATIENCE`]).

use std::sync::Arc;
use std::time::Duration;

use rmcp::transport::async_rw::DEFAULT_MAX_LINE_LENGTH;
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::io::{DuplexStream, ReadHalf, WriteHalf};
use tokio::sync::{Mutex, mpsc};
use tokio::task::{JoinHandle, JoinSet};

use super::tasks::{Incoming, StdioTasks};
use crate::gateway::{GatewayContext, OwnedInFlightGuard};

/// The room of the pipe between the pump and rmcp, each way.
const PIPE_BYTES: usize = 64 * 1024;
/// Lines waiting for stdout.
const WAITING_LINES: usize = 64;
/// How long answers still running get once stdin ends (rmcp's own drain), and the last lines to leave.
pub const CLOSING_PATIENCE: Duration = Duration::from_secs(5);

/// rmcp's input, written by the reader and by answers that hand their request on.
type ToRmcp = Arc<Mutex<WriteHalf<DuplexStream>>>;

/// The running pump.
pub struct Pump {
    reading: JoinHandle<()>,
    forwarding: JoinHandle<()>,
    writing: JoinHandle<()>,
}

impl Pump {
    /// Starts the pump between `input`, `output` and rmcp, whose end of the pipe it returns (a duplex stream: when
    /// rmcp drops it, the pump reads the end of rmcp's output).
    pub fn start<R, W>(ctx: Arc<GatewayContext>, tasks: Arc<StdioTasks>, input: R, output: W) -> (Pump, DuplexStream)
    where
        R: AsyncRead + Unpin + Send + 'static,
        W: AsyncWrite + Unpin + Send + 'static,
    {
        let (rmcp_end, ours) = tokio::io::duplex(PIPE_BYTES);
        let (from_rmcp, to_rmcp) = tokio::io::split(ours);
        let (lines, waiting) = mpsc::channel(WAITING_LINES);
        let writing = tokio::spawn(write_lines(waiting, output));
        let forwarding = tokio::spawn(forward(from_rmcp, Arc::clone(&tasks), lines.clone()));
        let reader = Reader { ctx, tasks, to_rmcp: Arc::new(Mutex::new(to_rmcp)), lines };
        let reading = tokio::spawn(reader.run(input));
        (Pump { reading, forwarding, writing }, rmcp_end)
    }

    /// Ends the pump once rmcp has: the reader gets `patience` to finish (it does at the end of stdin), then the last
    /// lines are written out.
    pub async fn finish(self, patience: Duration) {
        let Pump { reading, forwarding, writing } = self;
        end(reading, patience).await;
        end(forwarding, CLOSING_PATIENCE).await;
        end(writing, CLOSING_PATIENCE).await;
    }
}

/// Waits `within` for `task`, then ends it.
async fn end(mut task: JoinHandle<()>, within: Duration) {
    if tokio::time::timeout(within, &mut task).await.is_err() {
        task.abort();
        let _ = task.await;
    }
}

/// The reading task's state.
struct Reader {
    ctx: Arc<GatewayContext>,
    tasks: Arc<StdioTasks>,
    to_rmcp: ToRmcp,
    lines: mpsc::Sender<Vec<u8>>,
}

impl Reader {
    async fn run<R: AsyncRead + Unpin>(self, input: R) {
        let mut input = BufReader::new(input);
        let mut line = Vec::new();
        let mut answering = JoinSet::new();
        loop {
            match read_line(&mut input, &mut line, DEFAULT_MAX_LINE_LENGTH).await {
                Line::Whole => {}
                Line::TooLong => {
                    // As rmcp's transport says it.
                    tracing::error!(
                        max_line_length = DEFAULT_MAX_LINE_LENGTH,
                        "Incoming message exceeded the maximum line length, discarding it"
                    );
                    continue;
                }
                Line::End => break,
            }
            while answering.try_join_next().is_some() {}
            match self.tasks.read(&line) {
                Incoming::Rmcp => {
                    if pass(&self.to_rmcp, &line).await.is_err() {
                        break;
                    }
                }
                Incoming::Tasks(message) => {
                    let running = OwnedInFlightGuard::enter(&self.ctx);
                    let (tasks, to_rmcp, lines) =
                        (Arc::clone(&self.tasks), Arc::clone(&self.to_rmcp), self.lines.clone());
                    let line = line.clone();
                    answering.spawn(async move {
                        let _running = running;
                        match tasks.answer(message).await {
                            Some(reply) => {
                                let mut reply = reply.to_string().into_bytes();
                                reply.push(b'\n');
                                let _ = lines.send(reply).await;
                            }
                            // A call that runs as a plain call: rmcp's, as if it had come straight.
                            None => {
                                let _ = pass(&to_rmcp, &line).await;
                            }
                        }
                    });
                }
            }
        }
        // The client has said goodbye (or rmcp has gone): rmcp's input ends as stdin did.
        let _ = self.to_rmcp.lock().await.shutdown().await;
        let drained = async { while answering.join_next().await.is_some() {} };
        let _ = tokio::time::timeout(CLOSING_PATIENCE, drained).await;
    }
}

/// Hands `line` to rmcp, whole.
async fn pass(to_rmcp: &ToRmcp, line: &[u8]) -> std::io::Result<()> {
    let mut to_rmcp = to_rmcp.lock().await;
    to_rmcp.write_all(line).await?;
    to_rmcp.flush().await
}

/// rmcp's lines, amended, to the writer. A last line rmcp did not finish is dropped.
async fn forward(from_rmcp: ReadHalf<DuplexStream>, tasks: Arc<StdioTasks>, lines: mpsc::Sender<Vec<u8>>) {
    let mut from_rmcp = BufReader::new(from_rmcp);
    loop {
        let mut line = Vec::new();
        match from_rmcp.read_until(b'\n', &mut line).await {
            Ok(0) | Err(_) => return,
            Ok(_) if !line.ends_with(b"\n") => return,
            Ok(_) => {}
        }
        if lines.send(tasks.amend(line).await).await.is_err() {
            return;
        }
    }
}

/// Writes each line to `output`, whole, flushing when none is waiting.
async fn write_lines<W: AsyncWrite + Unpin>(mut waiting: mpsc::Receiver<Vec<u8>>, mut output: W) {
    while let Some(line) = waiting.recv().await {
        let written = match output.write_all(&line).await {
            Ok(()) if waiting.is_empty() => output.flush().await,
            other => other,
        };
        if let Err(error) = written {
            tracing::info!(%error, "stdout closed");
            return;
        }
    }
    let _ = output.flush().await;
}

/// What one bounded read of a line gave.
#[derive(Debug, PartialEq)]
enum Line {
    /// A whole line, its `\n` included, is in the buffer.
    Whole,
    /// A line longer than the bound, read and dropped.
    TooLong,
    /// The end of the input (an unfinished last line is dropped, as rmcp drops it) or a read error.
    End,
}

/// Reads one line into `line` (cleared first) without ever holding more than `max` bytes of it.
async fn read_line<R: AsyncBufRead + Unpin>(input: &mut R, line: &mut Vec<u8>, max: usize) -> Line {
    line.clear();
    let mut too_long = false;
    loop {
        let available = match input.fill_buf().await {
            Ok([]) => return Line::End,
            Ok(available) => available,
            Err(error) => {
                tracing::error!("Error reading from stream: {error}");
                return Line::End;
            }
        };
        let newline = available.iter().position(|byte| *byte == b'\n');
        let take = newline.map_or(available.len(), |at| at + 1);
        if !too_long && line.len().saturating_add(take) > max {
            too_long = true;
            *line = Vec::new();
        }
        if !too_long {
            line.extend_from_slice(&available[..take]);
        }
        input.consume(take);
        if newline.is_some() {
            return if too_long { Line::TooLong } else { Line::Whole };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn lines_are_bounded_and_a_long_one_is_dropped_whole() {
        let input = b"{\"a\":1}\n0123456789abcdef\n{\"b\":2}\r\nunfinished".to_vec();
        let mut input = BufReader::with_capacity(4, &input[..]);
        let mut line = Vec::new();
        assert_eq!(read_line(&mut input, &mut line, 10).await, Line::Whole);
        assert_eq!(line, b"{\"a\":1}\n");
        assert_eq!(read_line(&mut input, &mut line, 10).await, Line::TooLong);
        assert_eq!(read_line(&mut input, &mut line, 10).await, Line::Whole);
        assert_eq!(line, b"{\"b\":2}\r\n");
        assert_eq!(read_line(&mut input, &mut line, 10).await, Line::End, "an unfinished last line is dropped");
    }
}
