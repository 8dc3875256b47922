//! Tasks (VASA `getTaskUpdate`, `cancelTask`): the operations VASA runs as
//! tasks — create, clone, fast clone, revert, resize, prepare to snapshot —
//! are recorded as one each. Every one of them is metadata-only here, so a
//! task is complete (Success or Error, progress 100) by the time the call that
//! made it answers; a host that polls gets its outcome, and cancelling one
//! answers that it has finished. Kept in memory, the newest [`MAX_TASKS`].

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

use crate::fault::{FaultBody, VvolFault};

/// Most tasks kept.
pub const MAX_TASKS: usize = 4096;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum TaskState {
    Queued,
    Running,
    Success,
    Error,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TaskInfo {
    pub id: u64,
    /// VASA's name of the operation, e.g. createVirtualVolume.
    pub operation: String,
    /// The vVol the operation was asked about (none for a create).
    pub subject: Option<String>,
    pub state: TaskState,
    pub progress_percent: u8,
    /// The vVol the task made or changed, once it succeeded.
    pub result: Option<String>,
    pub fault: Option<FaultBody>,
    pub started_unix_s: u64,
    pub finished_unix_s: Option<u64>,
}

#[derive(Debug)]
pub(crate) struct TaskLog {
    tasks: VecDeque<TaskInfo>,
    next_id: u64,
}

impl Default for TaskLog {
    fn default() -> Self {
        TaskLog {
            tasks: VecDeque::new(),
            next_id: 1,
        }
    }
}

impl TaskLog {
    /// Records a finished operation as a task.
    pub fn record(
        &mut self,
        operation: &str,
        subject: Option<String>,
        outcome: Result<String, &VvolFault>,
        started_unix_s: u64,
    ) -> TaskInfo {
        if self.tasks.len() == MAX_TASKS {
            self.tasks.pop_front();
        }
        let (state, result, fault) = match outcome {
            Ok(object) => (TaskState::Success, Some(object), None),
            Err(fault) => (TaskState::Error, None, Some(fault.body())),
        };
        let task = TaskInfo {
            id: self.next_id,
            operation: operation.to_string(),
            subject,
            state,
            progress_percent: 100,
            result,
            fault,
            started_unix_s,
            finished_unix_s: Some(crate::now_unix_s()),
        };
        self.next_id += 1;
        self.tasks.push_back(task.clone());
        task
    }

    pub fn get(&self, id: u64) -> Result<TaskInfo, VvolFault> {
        self.tasks
            .iter()
            .find(|t| t.id == id)
            .cloned()
            .ok_or_else(|| {
                VvolFault::NotFound(format!("task {id} (the newest {MAX_TASKS} are kept)"))
            })
    }

    /// The tasks after `last_seen`, oldest first.
    pub fn since(&self, last_seen: u64) -> Vec<TaskInfo> {
        self.tasks
            .iter()
            .filter(|t| t.id > last_seen)
            .cloned()
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tasks_are_kept_newest_first_out_and_answer_their_outcome() {
        let mut log = TaskLog::default();
        let ok = log.record("createVirtualVolume", None, Ok("rfc4122.x".into()), 1);
        assert_eq!((ok.state, ok.progress_percent), (TaskState::Success, 100));
        let fault = VvolFault::NotFound("container 'c'".into());
        let failed = log.record("createVirtualVolume", None, Err(&fault), 1);
        assert_eq!(failed.fault.unwrap().kind, "NotFound");
        assert_eq!(log.get(ok.id).unwrap().result.as_deref(), Some("rfc4122.x"));
        for _ in 0..MAX_TASKS {
            log.record("resizeVirtualVolume", Some("v".into()), Ok("v".into()), 2);
        }
        assert!(log.get(ok.id).is_err(), "the oldest go first");
        assert_eq!(log.since(0).len(), MAX_TASKS);
    }
}
