//! Throwaway certificates (rcgen): a CA and a leaf for `localhost` and `127.0.0.1`, for
//! `vodkit tls selfsigned`, the bench's per-run certificates and the tests (which also
//! need expired and wrong-host leaves).

use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};

/// Names the default leaf is valid for.
pub const DEFAULT_HOSTS: [&str; 2] = ["localhost", "127.0.0.1"];

/// A calendar date: (year, month, day).
pub type Ymd = (i32, u8, u8);

/// What the leaf certificate says.
#[derive(Debug, Clone)]
pub struct LeafSpec {
    /// DNS names and IP addresses (an IP-looking string becomes an IP SAN).
    pub hosts: Vec<String>,
    /// Validity as (year, month, day) dates; `None`: rcgen's default (1975 to 4096).
    pub validity: Option<(Ymd, Ymd)>,
}

impl Default for LeafSpec {
    fn default() -> Self {
        LeafSpec {
            hosts: DEFAULT_HOSTS.iter().map(|h| h.to_string()).collect(),
            validity: None,
        }
    }
}

/// A CA certificate, a leaf it signed, and the leaf's key, all PEM.
#[derive(Debug, Clone)]
pub struct Bundle {
    pub ca_pem: String,
    pub cert_pem: String,
    pub key_pem: String,
}

/// Where [`write_bundle`] put the files.
#[derive(Debug, Clone)]
pub struct Files {
    pub ca: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// Make a fresh CA and a leaf signed by it (ECDSA P-256 keys).
pub fn generate(spec: &LeafSpec) -> Result<Bundle, String> {
    let err = |e: rcgen::Error| format!("certificate generation: {e}");
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).map_err(err)?;
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "vodkit throwaway CA");
    ca_params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let ca_key = KeyPair::generate().map_err(err)?;
    let ca_cert = ca_params.self_signed(&ca_key).map_err(err)?;

    let mut leaf = CertificateParams::new(spec.hosts.clone()).map_err(err)?;
    leaf.distinguished_name.push(
        DnType::CommonName,
        spec.hosts.first().map(String::as_str).unwrap_or("vodkit"),
    );
    leaf.is_ca = IsCa::ExplicitNoCa;
    leaf.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    leaf.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    if let Some(((y0, m0, d0), (y1, m1, d1))) = spec.validity {
        leaf.not_before = rcgen::date_time_ymd(y0, m0, d0);
        leaf.not_after = rcgen::date_time_ymd(y1, m1, d1);
    }
    let leaf_key = KeyPair::generate().map_err(err)?;
    let issuer = Issuer::from_params(&ca_params, &ca_key);
    let cert = leaf.signed_by(&leaf_key, &issuer).map_err(err)?;
    Ok(Bundle {
        ca_pem: ca_cert.pem(),
        cert_pem: cert.pem(),
        key_pem: leaf_key.serialize_pem(),
    })
}

fn write_file(path: &Path, text: &str, mode: u32) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt as _;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(mode)
        .open(path)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    // An existing file keeps its old mode through open(); set it explicitly.
    f.set_permissions(std::fs::Permissions::from_mode(mode))
        .and_then(|()| f.write_all(text.as_bytes()))
        .map_err(|e| format!("{}: {e}", path.display()))
}

/// Write `ca.pem`, `cert.pem` and `key.pem` (mode 0600) into `dir`, creating it.
pub fn write_bundle(dir: &Path, bundle: &Bundle) -> Result<Files, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let files = Files {
        ca: dir.join("ca.pem"),
        cert: dir.join("cert.pem"),
        key: dir.join("key.pem"),
    };
    write_file(&files.key, &bundle.key_pem, 0o600)?;
    write_file(&files.cert, &bundle.cert_pem, 0o644)?;
    write_file(&files.ca, &bundle.ca_pem, 0o644)?;
    Ok(files)
}

/// A fresh CA and `localhost`/`127.0.0.1` leaf written into `dir`.
pub fn write_dir(dir: &Path) -> Result<Files, String> {
    write_bundle(dir, &generate(&LeafSpec::default())?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_three_pem_files_with_a_private_key() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let files = write_dir(&dir.path().join("sub")).unwrap();
        let mode = std::fs::metadata(&files.key).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let ca = std::fs::read_to_string(&files.ca).unwrap();
        let cert = std::fs::read_to_string(&files.cert).unwrap();
        let key = std::fs::read_to_string(&files.key).unwrap();
        assert!(ca.starts_with("-----BEGIN CERTIFICATE-----"));
        assert!(cert.starts_with("-----BEGIN CERTIFICATE-----"));
        assert!(key.contains("PRIVATE KEY-----"));
        assert_ne!(ca, cert);
    }
}
