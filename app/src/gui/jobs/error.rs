//! `JobError`: why a job returned no result, a stop the user asked for (`Cancelled`) told from
//! a real failure. The lowest file of `jobs/`: every job returns it.

use focus_core::Error;

/// Why a job returned no result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JobError {
    /// Stopped on request (its cancel flag).
    Cancelled,
    /// Failed, with the reason in one line.
    Failed(String),
}

impl std::fmt::Display for JobError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            JobError::Cancelled => f.write_str("cancelled"),
            JobError::Failed(e) => f.write_str(e),
        }
    }
}

impl From<Error> for JobError {
    fn from(e: Error) -> Self {
        match e {
            Error::Cancelled => JobError::Cancelled,
            e => JobError::Failed(e.to_string()),
        }
    }
}

impl From<String> for JobError {
    fn from(e: String) -> Self {
        JobError::Failed(e)
    }
}
