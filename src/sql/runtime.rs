//! Where storage work runs: sled's reads and writes block, so a statement
//! runs them where they block no other task of the async runtime.

use datafusion::common::{DataFusionError, Result};

/// Runs storage work (sled reads and writes, which block) where it blocks
/// no other task. With no task running on this thread (a thread waiting
/// in `block_on` for this very work, or no runtime at all) it runs right
/// here. On a multi-threaded runtime's worker it also runs right here,
/// after handing the worker's other tasks to another thread
/// (`block_in_place`): a hand-off of the work itself to the blocking pool
/// costs two thread wake-ups on the statement's path, which on two cores
/// were ~80 µs of a one-row `INSERT` (benchmark W10, embedded). On a
/// single-threaded runtime, where nothing else could run the other tasks,
/// it goes to the blocking pool.
///
/// A panic in `work` is an error either way, never an unwind through the
/// caller.
pub async fn off_runtime<T: Send + 'static>(
    work: impl FnOnce() -> Result<T> + Send + 'static,
) -> Result<T> {
    use tokio::runtime::RuntimeFlavor;
    match tokio::runtime::Handle::try_current() {
        Ok(runtime) if tokio::task::try_id().is_some() => match runtime.runtime_flavor() {
            RuntimeFlavor::MultiThread => tokio::task::block_in_place(|| caught(work)),
            _ => runtime
                .spawn_blocking(work)
                .await
                .map_err(|e| DataFusionError::External(Box::new(e)))?,
        },
        _ => caught(work),
    }
}

/// `work`'s result, or its panic as an error.
fn caught<T>(work: impl FnOnce() -> Result<T>) -> Result<T> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(work)).unwrap_or_else(|panic| {
        Err(DataFusionError::Execution(crate::error::stopped_by_panic(
            panic.as_ref(),
        )))
    })
}

#[cfg(test)]
mod tests {
    use super::off_runtime;
    use datafusion::common::{DataFusionError, Result};
    use std::thread;

    fn runtime() -> Result<tokio::runtime::Runtime> {
        Ok(tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .build()?)
    }

    /// Storage work a thread waits for in `block_on` runs on that thread
    /// (no hand-off); from a task on a multi-threaded runtime's worker it
    /// runs on the worker too, and the worker's other tasks go on
    /// elsewhere: with one worker, work that waits for another task ends.
    #[test]
    fn storage_work_runs_where_it_blocks_no_task() -> Result<()> {
        let runtime = runtime()?;
        let caller = thread::current().id();
        let ran_on = runtime.block_on(off_runtime(|| Ok(thread::current().id())))?;
        assert_eq!(ran_on, caller);
        let one_worker = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .build()?;
        let (worker, ran_on) = one_worker
            .block_on(one_worker.spawn(async {
                let worker = thread::current().id();
                let ran_on = off_runtime(|| {
                    let (tx, rx) = std::sync::mpsc::channel();
                    tokio::spawn(async move { tx.send(()) });
                    rx.recv_timeout(std::time::Duration::from_secs(30))
                        .map_err(|e| DataFusionError::External(Box::new(e)))?;
                    Ok(thread::current().id())
                })
                .await;
                (worker, ran_on)
            }))
            .map_err(|e| DataFusionError::External(Box::new(e)))?;
        assert_eq!(ran_on?, worker);
        Ok(())
    }

    /// On a single-threaded runtime the work goes to the blocking pool, so
    /// the runtime's other tasks go on.
    #[test]
    fn storage_work_leaves_a_single_threaded_runtime() -> Result<()> {
        let runtime = tokio::runtime::Builder::new_current_thread().build()?;
        let caller = thread::current().id();
        let ran_on = runtime
            .block_on(async {
                tokio::spawn(off_runtime(|| {
                    let (tx, rx) = std::sync::mpsc::channel();
                    tokio::runtime::Handle::current().spawn(async move { tx.send(()) });
                    rx.recv_timeout(std::time::Duration::from_secs(30))
                        .map_err(|e| DataFusionError::External(Box::new(e)))?;
                    Ok(thread::current().id())
                }))
                .await
            })
            .map_err(|e| DataFusionError::External(Box::new(e)))??;
        assert_ne!(ran_on, caller);
        Ok(())
    }

    /// A panic in storage work is the statement's error wherever it ran,
    /// not an unwind through the caller.
    #[test]
    fn a_panic_in_storage_work_is_an_error() -> Result<()> {
        let runtime = runtime()?;
        let inline = runtime.block_on(off_runtime(|| -> Result<()> { panic!("the work broke") }));
        let message = inline.err().map(|e| e.to_string()).unwrap_or_default();
        assert!(message.contains("the work broke"), "{message:?}");
        let in_task = runtime
            .block_on(runtime.spawn(off_runtime(|| -> Result<()> { panic!("the work broke") })))
            .map_err(|e| DataFusionError::External(Box::new(e)))?;
        assert!(in_task.is_err());
        Ok(())
    }
}
