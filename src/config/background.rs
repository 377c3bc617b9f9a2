//! Work on the configuration that must not compete with requests (issue 36).
//!
//! Reloading a configuration of a million keys (reading it from Redis, decoding, validating, indexing), writing one
//! (the admin API, the Redis store's compare-and-set) and freeing a retired one (`retire.rs`) each keep a core busy for
//! seconds. On a machine of two cores that is a core the requests' worker shares with the clients, the upstreams and
//! Redis: at the same priority the scheduler gives the reload its turns while a request waits, and calls that take
//! 0.1 ms took 100-400 ms during a reload. So that work runs on threads at the lowest priority: they take whatever
//! the requests leave, and a reload takes longer only when the machine is saturated.
//!
//! The lowest is Linux's `SCHED_IDLE` policy (any thread may take it for itself), with nice 19 where that is refused.
//! Nice 19 alone was not enough: the scheduler let a nice-19 thread that was faulting in or freeing a gigabyte finish
//! its turn of 10-16 ms on its CPU while a request's worker, woken onto that CPU, waited for it, and the longest call
//! during a 1M-key reload was 15-28 ms; a `SCHED_IDLE` thread gives its CPU up at the next chance (measured: 4.7-8.6
//! ms, BENCHMARKS.md).
//!
//! A thread's priority cannot be raised again without privileges, so the work gets a thread of its own each time
//! ([`run`]): reloads and admin writes are rare, and a thread costs tens of microseconds.

/// The lowest priority a thread can be given without privileges.
const LOWEST: i32 = 19;

/// Lowers the calling thread's priority to the lowest: `SCHED_IDLE`, and nice 19. Where the system refuses, the
/// thread keeps its priority.
pub fn yield_to_requests() {
    #[cfg(target_os = "linux")]
    {
        use thread_priority::{NormalThreadSchedulePolicy, ThreadPriority, ThreadSchedulePolicy};
        let idle = ThreadSchedulePolicy::Normal(NormalThreadSchedulePolicy::Idle);
        let native = thread_priority::thread_native_id();
        if let Err(e) = thread_priority::set_thread_priority_and_policy(native, ThreadPriority::Min, idle) {
            tracing::debug!(error = ?e, "a background thread keeps its scheduling policy");
        }
    }
    if let Err(e) = rustix::process::setpriority_process(None, LOWEST) {
        tracing::debug!(error = %e, "a background thread keeps its priority");
    }
}

/// Why background work gave no result.
#[derive(Debug, thiserror::Error)]
#[error("the background work ended without a result (it panicked)")]
pub struct Aborted;

/// The most threads of [`run`] at once; more work waits for one to end (an admin client sending many slow writes at
/// once must not make a thread for each).
const MAX_THREADS: usize = 32;

/// Runs `work` on a thread of its own named `name`, at the lowest priority, and gives its result. Should no thread
/// start, it runs on tokio's blocking pool as before.
pub async fn run<T: Send + 'static>(name: &str, work: impl FnOnce() -> T + Send + 'static) -> Result<T, Aborted> {
    static THREADS: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(MAX_THREADS);
    let _turn = THREADS.acquire().await.map_err(|_| Aborted)?;
    let (done, result) = tokio::sync::oneshot::channel();
    let mut work = Some(work);
    let (tx, rx) = std::sync::mpsc::sync_channel::<Box<dyn FnOnce() -> T + Send>>(1);
    let started = std::thread::Builder::new().name(name.to_string()).spawn(move || {
        yield_to_requests();
        if let Ok(work) = rx.recv() {
            let _ = done.send(work());
        }
    });
    match started {
        Ok(_) => {
            if let Some(work) = work.take() {
                let _ = tx.send(Box::new(work));
            }
            result.await.map_err(|_| Aborted)
        }
        Err(e) => {
            tracing::warn!(error = %e, "no thread for background work; it runs on the blocking pool");
            let work = work.take().ok_or(Aborted)?;
            tokio::task::spawn_blocking(work).await.map_err(|_| Aborted)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nice_of_this_thread() -> i32 {
        rustix::process::getpriority_process(None).unwrap()
    }

    #[tokio::test]
    async fn work_runs_on_a_thread_of_its_own_at_the_lowest_priority() {
        let here = std::thread::current().id();
        let (there, nice, policy) = run("mcpgw-test", move || {
            (std::thread::current().id(), nice_of_this_thread(), thread_priority::thread_schedule_policy())
        })
        .await
        .unwrap();
        assert_ne!(there, here);
        assert_eq!(nice, LOWEST);
        #[cfg(not(target_os = "linux"))]
        let _ = policy;
        #[cfg(target_os = "linux")]
        {
            use thread_priority::{NormalThreadSchedulePolicy, ThreadSchedulePolicy};
            assert_eq!(policy.unwrap(), ThreadSchedulePolicy::Normal(NormalThreadSchedulePolicy::Idle));
            assert_ne!(
                thread_priority::thread_schedule_policy().unwrap(),
                ThreadSchedulePolicy::Normal(NormalThreadSchedulePolicy::Idle),
                "the caller's thread keeps its policy"
            );
        }
        assert_ne!(nice_of_this_thread(), LOWEST, "the caller's thread keeps its priority");
        let panicked = run("mcpgw-test", || -> u8 { panic!("boom") }).await;
        assert!(panicked.is_err());
    }
}
