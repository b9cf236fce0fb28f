//! nginx as a peer server: a generated config tuned the way seed 001 tuned it
//! (sendfile, long keep-alive, no per-connection request cap, one worker per core) with
//! every writable path inside the run directory and the listener on loopback.

use crate::{quoted, PeerConfig};
use std::path::{Path, PathBuf};

/// The nginx access-log format the trace analyzer reads (docs/trace.md, `vodkit_trace`):
/// completion time, service time, connection, session id, request URI, requested range,
/// status, bytes sent (with headers), body bytes sent.
pub const ACCESS_LOG_FORMAT: &str = "$msec $request_time $connection \"$http_x_session_id\" \
\"$request_uri\" \"$http_range\" $status $bytes_sent $body_bytes_sent";

/// What an nginx config needs to know.
#[derive(Debug, Clone)]
pub struct NginxSetup {
    pub root: PathBuf,
    pub run_dir: PathBuf,
    pub port: u16,
    pub workers: usize,
    /// `aio threads`: reads and `sendfile` in the default thread pool, with this many
    /// threads per worker (nginx's own default is 32).
    pub aio_threads: Option<usize>,
    /// Directives added to the `server` block, before its `location /`.
    pub server_extra: String,
    /// The access log's format (`None`: [`ACCESS_LOG_FORMAT`]).
    pub log_format: Option<String>,
    /// Run workers as root (only when the runner itself is root, so they can read any file set).
    pub as_root: bool,
    /// Open-file limit to ask for (None: keep the inherited one, e.g. when it cannot be raised).
    pub nofile: Option<u64>,
    /// Serve HTTPS with these files (`listen … ssl`, TLS 1.3, sendfile stays on).
    pub tls: Option<crate::tls::TlsFiles>,
    /// HTTP/2 on the listener: nginx 1.22's `http2` parameter of `listen` (negotiated by
    /// ALPN with `ssl`; without it the port speaks only prior-knowledge HTTP/2).
    pub http2: bool,
}

/// The open-file limit nginx's workers run with (`worker_rlimit_nofile`): 65536, or the hard
/// limit when that is lower. Always set, also when the inherited soft limit is already that
/// high: `worker_connections` is derived from it, and left at nginx's 4096 a run of 10,000
/// viewers on two workers had nginx closing kept-alive connections ("worker_connections are
/// not enough, reusing connections") and failing sessions no CPU limit explained.
pub fn nofile_target() -> Option<u64> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct we pass.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return None;
    }
    Some(65536u64.min(lim.rlim_max))
}

impl PeerConfig for NginxSetup {
    const NAME: &'static str = "nginx";
    const CONF_FILE: &'static str = "nginx.conf";
    const IS_ERROR_LINE: fn(&str) -> bool = is_error_line;
    fn run_dir(&self) -> &Path {
        &self.run_dir
    }
    fn render(&self) -> String {
        render(self)
    }
}

/// The `server`-block directives that make nginx a live origin for `vodkit live push`
/// (its WebDAV module: `PUT` and `DELETE` under `prefix`, directories created on the way),
/// refusing writes without `Authorization: Bearer TOKEN` with 403. Pass them as
/// [`crate::launch::PeerSetup::server_extra`]. The token may hold only letters, digits and
/// `-._~+/=` (it is written into the config).
pub fn live_origin_directives(
    prefix: &str,
    token: &str,
    max_object_bytes: u64,
) -> Result<String, String> {
    let prefix = crate::live_prefix_and_token(prefix, token)?;
    Ok(format!(
        "        location {prefix} {{\n\
            dav_methods PUT DELETE;\n\
            create_full_put_path on;\n\
            client_max_body_size {max_object_bytes};\n\
            set $vodkit_live_write \"\";\n\
            if ($request_method ~ ^(PUT|DELETE)$) {{ set $vodkit_live_write \"w\"; }}\n\
            if ($http_authorization != \"Bearer {token}\") {{ set $vodkit_live_write \"${{vodkit_live_write}}x\"; }}\n\
            if ($vodkit_live_write = \"wx\") {{ return 403; }}\n\
        }}\n"
    ))
}

/// The `server`-block directives that make nginx check expiring signed URLs on every
/// request, as its documentation shows: `secure_link $arg_md5,$arg_expires;
/// secure_link_md5 "$secure_link_expires$uri SECRET";`, 403 for a missing or bad signature
/// and 410 for an expired one (the form `vodkit serve --secure-link` checks and `vodkit load
/// --sign-key` makes). The secret may hold only letters, digits and `-._~+/=` (it is written
/// into the config, where `$`, quotes and spaces would change its meaning).
pub fn secure_link_directives(secret: &str) -> Result<String, String> {
    let safe = |c: char| c.is_ascii_alphanumeric() || "-._~+/=".contains(c);
    if secret.is_empty() || !secret.chars().all(safe) {
        return Err(
            "the secure_link secret for nginx may hold only letters, digits and -._~+/=".into(),
        );
    }
    Ok(format!(
        "        secure_link $arg_md5,$arg_expires;\n\
        secure_link_md5 \"$secure_link_expires$uri {secret}\";\n\
        if ($secure_link = \"\") {{ return 403; }}\n\
        if ($secure_link = \"0\") {{ return 410; }}\n"
    ))
}

/// `server`-block directives for an open-file cache of `max` files (0: explicitly off):
/// nginx's `open_file_cache` with its default 60 s validity, errors not cached.
pub fn open_file_cache_directives(max: usize) -> String {
    if max == 0 {
        "        open_file_cache off;\n".into()
    } else {
        format!(
            "        open_file_cache max={max} inactive=60s;\n        open_file_cache_valid 60s;\n"
        )
    }
}

/// Render the nginx.conf for `setup`.
pub fn render(setup: &NginxSetup) -> String {
    let d = |name: &str| quoted(&setup.run_dir.join(name));
    let user = if setup.as_root {
        "user root root;\n"
    } else {
        ""
    };
    format!(
        "# Generated by vodkit bench. One worker per core, sendfile, long keep-alive.\n\
{user}daemon off;\n\
master_process on;\n\
worker_processes {workers};\n\
{pool}\
{rlimit}pid {pid};\n\
error_log {error_log} warn;\n\
events {{\n\
    worker_connections {connections};\n\
    multi_accept on;\n\
}}\n\
http {{\n\
    default_type application/octet-stream;\n\
    sendfile on;\n\
{aio}    tcp_nopush on;\n\
    tcp_nodelay on;\n\
    keepalive_timeout 3600s;\n\
    keepalive_requests 1000000000;\n\
    send_timeout 120s;\n\
    client_body_temp_path {body};\n\
    proxy_temp_path {proxy};\n\
    fastcgi_temp_path {fastcgi};\n\
    uwsgi_temp_path {uwsgi};\n\
    scgi_temp_path {scgi};\n\
    log_format vodkit_trace '{format}';\n\
    access_log {access} vodkit_trace buffer=256k flush=1s;\n\
    server {{\n\
        listen 127.0.0.1:{port}{ssl}{http2};\n\
        server_name localhost;\n\
{tls}\
        root {root};\n\
{extra}\
        location / {{ }}\n\
    }}\n\
}}\n",
        workers = setup.workers.max(1),
        aio = if setup.aio_threads.is_some() {
            "    aio threads;\n"
        } else {
            ""
        },
        pool = setup
            .aio_threads
            .map(|n| format!(
                "thread_pool default threads={} max_queue=65536;\n",
                n.max(1)
            ))
            .unwrap_or_default(),
        rlimit = setup
            .nofile
            .map(|n| format!("worker_rlimit_nofile {n};\n"))
            .unwrap_or_default(),
        connections = setup.nofile.unwrap_or(4096).min(16384),
        pid = d("nginx.pid"),
        error_log = quoted(&setup.error_log()),
        body = d("client_body_temp"),
        proxy = d("proxy_temp"),
        fastcgi = d("fastcgi_temp"),
        uwsgi = d("uwsgi_temp"),
        scgi = d("scgi_temp"),
        format = setup.log_format.as_deref().unwrap_or(ACCESS_LOG_FORMAT),
        access = quoted(&setup.access_log()),
        port = setup.port,
        ssl = if setup.tls.is_some() { " ssl" } else { "" },
        http2 = if setup.http2 { " http2" } else { "" },
        tls = setup
            .tls
            .as_ref()
            .map(crate::tls::nginx_directives)
            .unwrap_or_default(),
        root = quoted(&setup.root),
        extra = setup.server_extra,
    )
}

/// Lines of an nginx error log that mean the run was not clean.
pub fn is_error_line(line: &str) -> bool {
    ["[emerg]", "[alert]", "[crit]", "[error]"]
        .iter()
        .any(|t| line.contains(t))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workers_always_get_an_open_file_limit_to_size_their_connections_by() {
        // Also when the inherited soft limit is already high (the bench raises its own).
        let n = nofile_target().expect("getrlimit works");
        assert!(n > 0 && n <= 65536, "{n}");
    }

    #[test]
    fn config_has_the_seed_tuning_and_run_dir_paths() {
        let s = NginxSetup {
            root: "/srv/video".into(),
            run_dir: "/tmp/run x".into(),
            port: 18080,
            workers: 2,
            aio_threads: None,
            server_extra: String::new(),
            log_format: None,
            as_root: false,
            nofile: Some(65536),
            tls: None,
            http2: false,
        };
        let c = render(&s);
        for needle in [
            "sendfile on;",
            "keepalive_requests 1000000000;",
            "worker_processes 2;",
            "worker_rlimit_nofile 65536;",
            "worker_connections 16384;",
            "listen 127.0.0.1:18080;",
            "pid \"/tmp/run x/nginx.pid\";",
            "root \"/srv/video\";",
            "access_log \"/tmp/run x/access.log\" vodkit_trace",
            "$http_x_session_id",
        ] {
            assert!(c.contains(needle), "missing {needle} in\n{c}");
        }
        assert!(!c.contains("user root"));
        assert!(!c.contains("aio threads"));
        let threaded = render(&NginxSetup {
            aio_threads: Some(64),
            ..s.clone()
        });
        assert!(threaded.contains("    aio threads;\n"), "{threaded}");
        assert!(
            threaded.contains("thread_pool default threads=64 max_queue=65536;\n"),
            "{threaded}"
        );
        assert!(!c.contains("ssl"));
        let with_tls = NginxSetup {
            tls: Some(crate::tls::TlsFiles {
                cert: "/tmp/run x/cert.pem".into(),
                key: "/tmp/run x/key.pem".into(),
                ca: "/tmp/run x/ca.pem".into(),
            }),
            ..s.clone()
        };
        let tls = render(&with_tls);
        assert!(tls.contains("listen 127.0.0.1:18080 ssl;"), "{tls}");
        let h2 = render(&NginxSetup {
            http2: true,
            ..with_tls
        });
        assert!(h2.contains("listen 127.0.0.1:18080 ssl http2;"), "{h2}");
        assert!(tls.contains("sendfile on;") && tls.contains("ssl_protocols TLSv1.3;"));
        assert!(render(&NginxSetup { as_root: true, ..s }).contains("user root root;"));
    }

    #[test]
    fn error_lines_are_recognised() {
        assert!(is_error_line("2026/01/01 [crit] 12#12: open() failed"));
        assert!(!is_error_line(
            "2026/01/01 [notice] 12#12: signal process started"
        ));
    }
}
