//! A throw-away PKI for tests: a CA and a server certificate for `localhost` and `127.0.0.1`,
//! written as PEM files (the key with mode 0600, as crescentd requires).

use std::path::{Path, PathBuf};

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair};

/// The files of one test PKI.
#[derive(Debug, Clone)]
pub struct TestPki {
    /// The CA certificate clients verify against.
    pub ca_file: PathBuf,
    /// The server's chain (its certificate).
    pub cert_file: PathBuf,
    /// The server's private key (mode 0600).
    pub key_file: PathBuf,
}

impl TestPki {
    /// A CA named `ca_name` and a server certificate for `names` (DNS names or IPs), signed by
    /// it, in `dir`.
    pub fn generate(dir: &Path, ca_name: &str, names: &[&str]) -> TestPki {
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(DnType::CommonName, ca_name);
        let ca_key = KeyPair::generate().expect("CA key");
        let ca = ca_params.self_signed(&ca_key).expect("CA certificate");
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        let server_params = CertificateParams::new(names).expect("server params");
        let server_key = KeyPair::generate().expect("server key");
        let server = server_params
            .signed_by(&server_key, &ca, &ca_key)
            .expect("server certificate");
        std::fs::create_dir_all(dir).expect("pki dir");
        let pki = TestPki {
            ca_file: dir.join("ca.pem"),
            cert_file: dir.join("server.pem"),
            key_file: dir.join("server.key"),
        };
        std::fs::write(&pki.ca_file, ca.pem()).expect("write CA");
        std::fs::write(&pki.cert_file, server.pem()).expect("write certificate");
        write_private(&pki.key_file, server_key.serialize_pem().as_bytes());
        pki
    }

    /// The usual one: `localhost` and `127.0.0.1`.
    pub fn localhost(dir: &Path) -> TestPki {
        Self::generate(dir, "crescent test CA", &["localhost", "127.0.0.1"])
    }

    /// The `[tls]` section of a crescentd config file using these files.
    pub fn config_section(&self) -> String {
        format!(
            "[tls]\ncert_file = {:?}\nkey_file = {:?}\nca_file = {:?}\n",
            self.cert_file, self.key_file, self.ca_file
        )
    }
}

#[cfg(unix)]
fn write_private(path: &Path, bytes: &[u8]) {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .expect("create key file");
    f.write_all(bytes).expect("write key");
}

#[cfg(not(unix))]
fn write_private(path: &Path, bytes: &[u8]) {
    std::fs::write(path, bytes).expect("write key");
}
