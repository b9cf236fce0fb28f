//! Child-process servers under test (the peers and `vodkit serve`): the supervision from
//! `vodkit-peers` — free port, readiness probe, error-log lines, stop with the whole group.

pub use vodkit_peers::process::{
    find_program, free_port, http_get, http_status, ProcessError, ServerProcess, StartSpec,
};
