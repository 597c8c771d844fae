//! What a task carries from the session on the master that sent it, as
//! headers datafusion-distributed passes through to every task: the
//! session's memory limit, which the tasks of one session on a worker
//! share as one memory pool, and its settings (`SET datafusion.…`), which
//! each task runs under. The master sets them when a session is built and
//! again each time a statement changes its settings.

use std::collections::{BTreeMap, HashMap};
use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex, OnceLock, PoisonError, Weak};

use base64::Engine;
use datafusion::common::{internal_err, DataFusionError, Result};
use datafusion::config::ConfigOptions;
use datafusion::execution::memory_pool::{GreedyMemoryPool, MemoryLimit, TrackConsumersPool};
use datafusion::execution::runtime_env::{RuntimeEnv, RuntimeEnvBuilder};
use datafusion::prelude::SessionConfig;
use datafusion_distributed::{DistributedConfig, DistributedExt};

/// The header that carries the memory limit of the session whose query a
/// task is part of, in bytes.
const MEMORY_LIMIT: &str = "x-widesql-memory-limit";
/// The header that names that session, so that its tasks on one worker
/// share one memory pool.
const SESSION: &str = "x-widesql-session";
/// The header that carries the session's execution settings that differ
/// from DataFusion's defaults: a JSON object of `datafusion.execution.…`
/// keys and their values, in base64.
const SETTINGS: &str = "x-widesql-settings";

/// The settings a task carries: those a plan reads as it runs. The others
/// shape a plan as it is made, which the master did, or a session as it
/// is built (`datafusion.catalog.…`, which a task must not take).
const TASK_SETTINGS: &str = "datafusion.execution.";

/// The most bytes of settings a task carries: a worker takes 16 KiB of
/// headers in all.
const MAX_SETTINGS_BYTES: usize = 8 * 1024;

/// The random name of a session on the master, kept in its config so that
/// its headers name it the same after its settings change.
struct SessionName(String);

/// Makes the tasks of the session whose config is `config` carry its
/// memory `limit` and its settings.
pub(super) fn carry_session(config: &mut SessionConfig, limit: MemoryLimit) -> Result<()> {
    let headers = session_headers(config, limit)?;
    config.set_distributed_passthrough_headers(headers)
}

/// The headers the tasks of the session whose config is `config` carry.
fn session_headers(config: &mut SessionConfig, limit: MemoryLimit) -> Result<http::HeaderMap> {
    let name = match config.get_extension::<SessionName>() {
        Some(name) => name.0.clone(),
        None => {
            let name = uuid::Uuid::new_v4().simple().to_string();
            config.set_extension(Arc::new(SessionName(name.clone())));
            name
        }
    };
    let mut headers = http::HeaderMap::new();
    headers.insert(SESSION, header_value(&name)?);
    if let MemoryLimit::Finite(limit) = limit {
        headers.insert(MEMORY_LIMIT, http::HeaderValue::from(limit));
    }
    let settings = changed_settings(config.options());
    if !settings.is_empty() {
        let json = serde_json::to_vec(&settings)
            .map_err(|e| DataFusionError::Internal(format!("settings as JSON: {e}")))?;
        let encoded = base64::engine::general_purpose::STANDARD.encode(json);
        if encoded.len() > MAX_SETTINGS_BYTES {
            return Err(DataFusionError::Configuration(format!(
                "the session's settings take {} bytes as its tasks carry them, more than the \
                 {MAX_SETTINGS_BYTES} the workers take: set shorter values",
                encoded.len()
            )));
        }
        headers.insert(SETTINGS, header_value(&encoded)?);
    }
    Ok(headers)
}

fn header_value(text: &str) -> Result<http::HeaderValue> {
    http::HeaderValue::from_str(text)
        .map_err(|e| DataFusionError::Internal(format!("a task's header {text:?}: {e}")))
}

/// The settings of `options` a task carries ([`TASK_SETTINGS`]) whose
/// values differ from DataFusion's defaults.
fn changed_settings(options: &ConfigOptions) -> BTreeMap<String, String> {
    // Found once: a master makes these headers for every session it opens.
    static DEFAULTS: OnceLock<HashMap<String, Option<String>>> = OnceLock::new();
    let defaults = DEFAULTS.get_or_init(|| {
        ConfigOptions::default()
            .entries()
            .into_iter()
            .map(|entry| (entry.key, entry.value))
            .collect()
    });
    options
        .entries()
        .into_iter()
        .filter(|entry| entry.key.starts_with(TASK_SETTINGS))
        .filter_map(|entry| {
            let value = entry.value?;
            let default = defaults.get(&entry.key).cloned().flatten();
            (default.as_ref() != Some(&value)).then_some((entry.key, value))
        })
        .collect()
}

/// Applies the settings a task's `headers` carry to `config`, the config
/// the task runs under.
pub(super) fn apply_settings(headers: &http::HeaderMap, config: &mut SessionConfig) -> Result<()> {
    let Some(value) = headers.get(SETTINGS) else {
        return Ok(());
    };
    let json = base64::engine::general_purpose::STANDARD
        .decode(value.as_bytes())
        .map_err(|e| DataFusionError::Internal(format!("a task's settings are not base64: {e}")))?;
    let settings: BTreeMap<String, String> = serde_json::from_slice(&json)
        .map_err(|e| DataFusionError::Internal(format!("a task's settings are not JSON: {e}")))?;
    // A batch size datafusion-distributed set for its shuffles stays.
    let shuffles = DistributedConfig::from_session_config(config)
        .is_ok_and(|distributed| distributed.shuffle_batch_size != 0);
    for (key, value) in &settings {
        if !key.starts_with(TASK_SETTINGS) {
            return internal_err!("a task's setting {key} is not one a task takes");
        }
        if shuffles && key == "datafusion.execution.batch_size" {
            continue;
        }
        config
            .options_mut()
            .set(key, value)
            .map_err(|e| e.context(format!("the session's setting {key} = {value}")))?;
    }
    Ok(())
}

/// The runtimes (each with its session's memory pool) of the sessions
/// whose tasks run on a worker, by session, while a task holds them.
pub(super) type SessionRuntimes = Arc<Mutex<HashMap<String, Weak<RuntimeEnv>>>>;

/// The runtime a task whose headers are `headers` runs in: that of the
/// other tasks of its session still running on this worker, or a new one
/// (from `base`) with a memory pool of the session's limit; `None` when
/// its session has no limit.
pub(super) fn session_runtime(
    runtimes: &SessionRuntimes,
    headers: &http::HeaderMap,
    base: Option<&RuntimeEnv>,
) -> Result<Option<Arc<RuntimeEnv>>> {
    let Some(limit) = memory_limit(headers)? else {
        return Ok(None);
    };
    let session = headers.get(SESSION).and_then(|v| v.to_str().ok());
    let key = runtime_key(session.unwrap_or("-"), limit);
    let mut runtimes = runtimes.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(runtime) = runtimes.get(&key).and_then(Weak::upgrade) {
        return Ok(Some(runtime));
    }
    let pool = TrackConsumersPool::new(
        GreedyMemoryPool::new(limit),
        NonZeroUsize::MIN.saturating_add(4),
    );
    let runtime = base
        .map_or_else(RuntimeEnvBuilder::new, RuntimeEnvBuilder::from_runtime_env)
        .with_memory_pool(Arc::new(pool))
        .build_arc()?;
    // Sessions whose tasks all ended are forgotten.
    runtimes.retain(|_, runtime| runtime.strong_count() > 0);
    if session.is_some() {
        runtimes.insert(key, Arc::downgrade(&runtime));
    }
    Ok(Some(runtime))
}

/// Makes the tasks of the session whose config is `config` that run in
/// this process (a master's own stages, which its workers read) run in
/// `runtime`, the session's own: they take memory from the session's
/// pool, not from one of their own. Nothing for a session without a
/// limit, whose tasks take none.
pub(super) fn share_runtime(
    runtimes: &SessionRuntimes,
    config: &SessionConfig,
    runtime: &Arc<RuntimeEnv>,
) {
    let (Some(name), MemoryLimit::Finite(limit)) = (
        config.get_extension::<SessionName>(),
        runtime.memory_pool.memory_limit(),
    ) else {
        return;
    };
    let mut runtimes = runtimes.lock().unwrap_or_else(PoisonError::into_inner);
    runtimes.retain(|_, runtime| runtime.strong_count() > 0);
    runtimes.insert(runtime_key(&name.0, limit), Arc::downgrade(runtime));
}

/// The key of a session's runtime, by its name and memory limit: a task
/// sent after the session changed its limit takes a pool of the new one.
fn runtime_key(session: &str, limit: usize) -> String {
    format!("{session}/{limit}")
}

/// The memory limit a task's headers carry; `None` when its session has
/// none.
fn memory_limit(headers: &http::HeaderMap) -> Result<Option<usize>> {
    let Some(value) = headers.get(MEMORY_LIMIT) else {
        return Ok(None);
    };
    let limit = value.to_str().ok().and_then(|v| v.parse().ok());
    match limit {
        Some(limit) => Ok(Some(limit)),
        None => internal_err!("a task's memory limit is not a number of bytes: {value:?}"),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    fn headers(session: &str, limit: usize) -> http::HeaderMap {
        let mut headers = http::HeaderMap::new();
        headers.insert(MEMORY_LIMIT, limit.into());
        headers.insert(SESSION, session.parse().unwrap());
        headers
    }

    #[test]
    fn a_sessions_own_runtime_serves_its_tasks_in_this_process() -> Result<()> {
        let runtimes = SessionRuntimes::default();
        let limit = 1 << 20;
        let mut config = SessionConfig::new();
        let headers = session_headers(&mut config, MemoryLimit::Finite(limit))?;
        let own = RuntimeEnvBuilder::new()
            .with_memory_limit(limit, 1.0)
            .build_arc()?;
        share_runtime(&runtimes, &config, &own);
        let taken = session_runtime(&runtimes, &headers, None)?.expect("a limit");
        assert!(Arc::ptr_eq(&taken, &own));
        // After a SET of another limit, its tasks carry that one, and take
        // a pool of their own until the session's runtime is shared again.
        let headers = session_headers(&mut config, MemoryLimit::Finite(2 * limit))?;
        let taken = session_runtime(&runtimes, &headers, None)?.expect("a limit");
        assert!(!Arc::ptr_eq(&taken, &own));
        // A session without a limit shares nothing.
        let unlimited = RuntimeEnvBuilder::new().build_arc()?;
        share_runtime(&runtimes, &SessionConfig::new(), &unlimited);
        assert_eq!(runtimes.lock().unwrap().len(), 2);
        Ok(())
    }

    #[test]
    fn the_tasks_of_a_session_on_a_worker_share_one_memory_pool_of_its_limit() {
        let runtimes = SessionRuntimes::default();
        let runtime = |headers: &http::HeaderMap| {
            session_runtime(&runtimes, headers, None)
                .unwrap()
                .expect("a limit")
        };
        let first = runtime(&headers("s1", 1 << 20));
        let limit = first.memory_pool.memory_limit();
        assert!(
            matches!(limit, datafusion::execution::memory_pool::MemoryLimit::Finite(n) if n == 1 << 20)
        );
        // Another task of the session while the first runs: the same pool.
        let second = runtime(&headers("s1", 1 << 20));
        assert!(Arc::ptr_eq(&first, &second));
        // Another session: a pool of its own.
        let other = runtime(&headers("s2", 1 << 20));
        assert!(!Arc::ptr_eq(&first, &other));
        // Once its tasks ended, the session's next task gets a new pool,
        // and a session whose tasks all ended is forgotten.
        let first_pool = Arc::clone(&first.memory_pool);
        drop((first, second));
        let again = runtime(&headers("s1", 1 << 20));
        assert!(!Arc::ptr_eq(&first_pool, &again.memory_pool));
        drop(other);
        let _next = runtime(&headers("s4", 1 << 20));
        let held = runtimes.lock().unwrap();
        assert!(
            !held.contains_key(&format!("s2/{}", 1 << 20)),
            "{:?}",
            held.keys()
        );
        drop(held);
        // A session without a limit runs in the worker's own runtime.
        assert!(session_runtime(&runtimes, &http::HeaderMap::new(), None)
            .unwrap()
            .is_none());
        let mut bad = headers("s3", 1);
        bad.insert(MEMORY_LIMIT, "lots".parse().unwrap());
        assert!(session_runtime(&runtimes, &bad, None).is_err());
    }

    #[test]
    fn a_task_carries_the_settings_of_its_session_that_differ_from_the_defaults() {
        let mut master = SessionConfig::new()
            .with_batch_size(100)
            .set_str("datafusion.execution.time_zone", "+05:00")
            .set_str("datafusion.catalog.location", "junk")
            .set_str("datafusion.optimizer.max_passes", "2");
        let sent = session_headers(&mut master, MemoryLimit::Finite(1 << 20)).unwrap();
        assert_eq!(sent.get(MEMORY_LIMIT).unwrap(), "1048576");
        let name = sent.get(SESSION).unwrap().clone();
        // Only the execution settings that differ travel: not those that
        // shape a plan (the master made it) or a session as it is built.
        let settings = changed_settings(master.options());
        assert_eq!(
            settings.keys().collect::<Vec<_>>(),
            [
                "datafusion.execution.batch_size",
                "datafusion.execution.time_zone"
            ]
        );
        let mut task = SessionConfig::new();
        apply_settings(&sent, &mut task).unwrap();
        assert_eq!(task.batch_size(), 100);
        assert_eq!(
            task.options().execution.time_zone.as_deref(),
            Some("+05:00")
        );
        // After a change, the same session, with its new settings and no
        // limit.
        master
            .options_mut()
            .set("datafusion.execution.batch_size", "8192")
            .unwrap();
        let sent = session_headers(&mut master, MemoryLimit::Infinite).unwrap();
        assert_eq!(sent.get(SESSION), Some(&name));
        assert!(sent.get(MEMORY_LIMIT).is_none());
        let mut task = SessionConfig::new().with_batch_size(7);
        apply_settings(&sent, &mut task).unwrap();
        assert_eq!(
            task.batch_size(),
            7,
            "a setting back at its default is not sent"
        );
        // Settings that are not DataFusion's, or not settings, are refused.
        for bad in [
            r#"{"distributed.x":"1"}"#,
            r#"{"datafusion.catalog.location":"junk"}"#,
            r#"{"datafusion.execution.no_such":"1"}"#,
            "[1",
        ] {
            let mut headers = http::HeaderMap::new();
            let encoded = base64::engine::general_purpose::STANDARD.encode(bad);
            headers.insert(SETTINGS, encoded.parse().unwrap());
            assert!(
                apply_settings(&headers, &mut SessionConfig::new()).is_err(),
                "{bad}"
            );
        }
        // Settings too long for a worker's headers are refused.
        let mut long = SessionConfig::new();
        long.options_mut()
            .set("datafusion.execution.time_zone", &"+".repeat(9000))
            .unwrap();
        let error = session_headers(&mut long, MemoryLimit::Infinite).unwrap_err();
        assert!(error.to_string().contains("set shorter values"), "{error}");
    }
}
