//! The steps of a tablet move ([`super::Catalog::move_tablet`]) and what
//! tests do at them: stop the process as a crash would, hold the move
//! while they write, or make it keep fewer written keys. A move of a table
//! no test named passes each step at the cost of a lock.

use std::sync::{Arc, Mutex};

use crate::ids::TableId;

/// The steps of a move at which a test can stop the process as a crash
/// would ([`crash_moves_at`]) or hold the move ([`hold_moves_at`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MoveStep {
    /// The target's copy of the range was cleared (in the first
    /// locality group).
    Cleared,
    /// The first locality group's rows were copied, not the others'.
    Copying,
    /// A round that copies again, without locks, the keys written
    /// meanwhile has ended (reached after each; none runs when few keys
    /// were written); another round or the last part follows.
    CopiedAgain,
    /// Every row was copied and the target flushed; the catalog still
    /// names the source.
    Flushed,
    /// The catalog names the target; this process has not yet switched
    /// its routes.
    Committed,
}

/// The step at which moves stop the process.
static CRASH_AT: std::sync::Mutex<Option<MoveStep>> = std::sync::Mutex::new(None);

/// Makes every move of this process abort it at `step` (`None`: never),
/// for tests of what a crash there leaves. Only debug builds stop.
pub fn crash_moves_at(step: Option<MoveStep>) {
    *CRASH_AT.lock().unwrap_or_else(|p| p.into_inner()) = step;
}

/// Aborts the process when a test asked moves to stop at `step`, and
/// waits there while a test holds moves of table `id` at it.
pub(super) fn reached(id: TableId, step: MoveStep) {
    let armed = *CRASH_AT.lock().unwrap_or_else(|p| p.into_inner());
    if cfg!(debug_assertions) && armed == Some(step) {
        std::process::abort();
    }
    let gate = HOLDS
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
        .find(|(table, at, _)| *table == id && *at == step)
        .map(|(_, _, gate)| Arc::clone(gate));
    if let Some(gate) = gate {
        gate.wait_at();
    }
}

/// The moves that wait at a step: by table, step and gate.
static HOLDS: Mutex<Vec<(TableId, MoveStep, Arc<Gate>)>> = Mutex::new(Vec::new());

/// Where a held move waits: whether one reached it, whether it was let go.
#[derive(Debug, Default)]
struct Gate {
    state: Mutex<(bool, bool)>,
    changed: std::sync::Condvar,
}

impl Gate {
    fn wait_at(&self) {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        state.0 = true;
        self.changed.notify_all();
        while !state.1 {
            state = self.changed.wait(state).unwrap_or_else(|p| p.into_inner());
        }
    }
}

/// Moves of one table held at a step until this is dropped
/// ([`hold_moves_at`]).
#[derive(Debug)]
#[must_use = "the moves go on when it is dropped"]
pub struct MoveHold {
    gate: Arc<Gate>,
}

impl MoveHold {
    /// Waits up to `limit` for a move to reach the step; whether one did.
    pub fn reached(&self, limit: std::time::Duration) -> bool {
        let state = self.gate.state.lock().unwrap_or_else(|p| p.into_inner());
        let (state, _) = self
            .gate
            .changed
            .wait_timeout_while(state, limit, |state| !state.0)
            .unwrap_or_else(|p| p.into_inner());
        state.0
    }
}

impl Drop for MoveHold {
    fn drop(&mut self) {
        HOLDS
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|(_, _, gate)| !Arc::ptr_eq(gate, &self.gate));
        let mut state = self.gate.state.lock().unwrap_or_else(|p| p.into_inner());
        state.1 = true;
        self.gate.changed.notify_all();
    }
}

/// The most written keys the moves of a table keep, where a test lowered
/// it ([`limit_keys_noted`]).
static NOTED_LIMITS: Mutex<Vec<(TableId, usize)>> = Mutex::new(Vec::new());

/// Makes the moves of table `id` keep at most `limit` written keys per
/// locality group, for tests of a move that keeps too many.
pub fn limit_keys_noted(id: TableId, limit: usize) {
    NOTED_LIMITS
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .push((id, limit));
}

/// The most written keys a move of table `id` keeps per locality group,
/// where a test lowered it.
pub(super) fn noted_limit(id: TableId) -> Option<usize> {
    NOTED_LIMITS
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
        .find(|(table, _)| *table == id)
        .map(|(_, limit)| *limit)
}

/// Makes the moves of table `id` wait at `step` until the returned hold is
/// dropped, for tests of what runs meanwhile.
pub fn hold_moves_at(id: TableId, step: MoveStep) -> MoveHold {
    let gate = Arc::new(Gate::default());
    HOLDS
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .push((id, step, Arc::clone(&gate)));
    MoveHold { gate }
}
