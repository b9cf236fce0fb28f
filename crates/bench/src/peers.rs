//! The unmodified peers (nginx, Apache) as servers under test, started by `vodkit-peers`
//! with the generated configs; kept under this name for the launcher and the tests.

pub use vodkit_peers::launch::{
    apache_program, cores, nginx_program, no_wrap, start_apache, start_nginx, PeerError, PeerSetup,
    Wrap,
};
