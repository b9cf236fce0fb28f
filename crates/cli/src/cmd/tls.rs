//! `vodkit tls selfsigned` and the TLS flags shared by `vodkit serve`
//! (`--tls-cert`, `--tls-key`) and the clients, `vodkit load` and `vodkit live push`
//! (`--ca`, `--insecure`).

use std::path::PathBuf;
use std::time::Duration;

/// HTTPS flags of `vodkit serve`.
#[derive(clap::Args, Debug, Clone)]
pub struct ServeTls {
    /// Serve HTTPS (TLS 1.3 and 1.2, ALPN http/1.1 and with --http2 h2, session resumption) with this PEM
    /// certificate chain; needs --tls-key. Bodies are encrypted in user space by rustls:
    /// each range is read into the connection's buffer with pread from the page cache (or,
    /// with --io direct, taken from the O_DIRECT buffer pool) and sent as TLS records. kTLS
    /// (sendfile with encryption in the kernel) is not implemented; it was not available
    /// on the kernel vodkit was tested on. The start-up line says whether this kernel
    /// offers it and which body path the run uses. SIGHUP reloads the certificate and key
    /// without closing connections.
    #[arg(long, value_name = "PEM", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// PEM private key for --tls-cert; refused if world-readable.
    #[arg(long, value_name = "PEM", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// A TLS handshake must finish this long after the connection is accepted.
    #[arg(long, default_value = "10s", value_name = super::flags::DURATION, value_parser = super::flags::duration)]
    pub tls_handshake_timeout: Duration,
    /// Offer only these cipher suites, comma separated, by rustls name (e.g.
    /// TLS13_AES_128_GCM_SHA256); default: all of rustls's ring suites.
    #[arg(long, value_delimiter = ',', value_name = "SUITES")]
    pub tls_ciphers: Vec<String>,
}

impl ServeTls {
    /// The server's TLS settings (`None`: plaintext).
    pub fn settings(&self) -> Option<vodkit_server::tls::TlsSettings> {
        match (&self.tls_cert, &self.tls_key) {
            (Some(cert), Some(key)) => {
                let mut s = vodkit_server::tls::TlsSettings::new(cert, key);
                s.handshake_timeout = self.tls_handshake_timeout;
                s.cipher_suites = self.tls_ciphers.clone();
                Some(s)
            }
            _ => None,
        }
    }
}

/// Print the TLS body path of a server about to start; returns its URL scheme.
pub fn announce(config: &vodkit_server::ServerConfig) -> &'static str {
    if config.tls.is_none() {
        return "http";
    }
    eprintln!(
        "vodkit serve: {}",
        vodkit_server::tls::body_path_note(config.io.mode)
    );
    "https"
}

/// HTTPS flags of the clients: `vodkit load` and `vodkit live push`.
#[derive(clap::Args, Debug, Clone)]
pub struct ClientTls {
    /// For an https:// --target: trust server certificates signed by the CA certificates
    /// in this PEM file (e.g. ca.pem from `vodkit tls selfsigned`). In `vodkit load` each
    /// viewer resumes its own TLS session on later connections; handshake time counts in
    /// request latency.
    #[arg(long, value_name = "FILE", conflicts_with = "insecure")]
    pub ca: Option<PathBuf>,
    /// For an https:// --target: accept any certificate (expired, self-signed, another
    /// host's). For test servers only.
    #[arg(long)]
    pub insecure: bool,
}

impl ClientTls {
    /// How server certificates are checked (`None`: neither flag given).
    pub fn trust(&self) -> Option<vodkit_load::Trust> {
        match (&self.ca, self.insecure) {
            (Some(ca), _) => Some(vodkit_load::Trust::Ca(ca.clone())),
            (None, true) => Some(vodkit_load::Trust::Insecure),
            (None, false) => None,
        }
    }

    /// The TLS client these flags ask for (`None`: neither flag given).
    pub fn client(
        &self,
        target: &vodkit_load::Target,
    ) -> Result<Option<vodkit_load::TlsClient>, vodkit_load::InputError> {
        match self.trust() {
            Some(trust) => vodkit_load::TlsClient::new(trust, &target.name).map(Some),
            None => Ok(None),
        }
    }
}

#[derive(clap::Subcommand)]
pub enum Command {
    /// Write a throwaway CA (ca.pem) and a certificate (cert.pem) with its key (key.pem,
    /// mode 0600) valid for localhost and 127.0.0.1: for trying `vodkit serve --tls-cert`
    /// with `vodkit load --ca` or `curl --cacert`. Not for production.
    Selfsigned {
        /// Directory to write into (created if missing; existing files are replaced).
        #[arg(long)]
        out: PathBuf,
    },
}

pub fn run(command: Command) -> anyhow::Result<()> {
    match command {
        Command::Selfsigned { out } => {
            let files =
                vodkit_server::tls::selfsigned::write_dir(&out).map_err(anyhow::Error::msg)?;
            println!("CA:          {}", files.ca.display());
            println!("certificate: {}", files.cert.display());
            println!("key:         {} (mode 0600)", files.key.display());
            println!(
                "try: vodkit serve --root DIR --listen 127.0.0.1:8443 --tls-cert {} --tls-key {}",
                files.cert.display(),
                files.key.display()
            );
            println!(
                "     curl --cacert {} https://localhost:8443/FILE",
                files.ca.display()
            );
            Ok(())
        }
    }
}
