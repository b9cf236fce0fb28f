//! The media crate's one error type, under every module that can fail.

/// Errors: bad arguments or input (exit code 2) or the environment refusing (exit code 1).
#[derive(Debug, thiserror::Error)]
pub enum MediaError {
    #[error("{0}")]
    Input(String),
    #[error("{0}")]
    Runtime(String),
}
