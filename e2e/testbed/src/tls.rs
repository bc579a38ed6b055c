use std::path::PathBuf;

use anyhow::Result;
pub use rcgen::ExtendedKeyUsagePurpose;
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};

/// A CA, a server certificate for 127.0.0.1/localhost and a client certificate, as PEM files.
pub struct TlsFiles {
    pub dir: tempfile::TempDir,
    pub ca_cert: PathBuf,
    pub server_cert: PathBuf,
    pub server_key: PathBuf,
    pub client_cert: PathBuf,
    pub client_key: PathBuf,
}

/// A test CA that issues leaf certificates (PEM).
pub struct TestCa {
    pub cert_pem: String,
    issuer: Issuer<'static, KeyPair>,
}

impl TestCa {
    pub fn new(common_name: &str) -> Result<TestCa> {
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(DnType::CommonName, common_name);
        let cert_pem = params.self_signed(&key)?.pem();
        Ok(TestCa {
            cert_pem,
            issuer: Issuer::new(params, key),
        })
    }

    /// A certificate for `names` (DNS names or IPs) and its key, as PEM.
    pub fn issue(
        &self,
        names: &[&str],
        common_name: &str,
        usages: &[ExtendedKeyUsagePurpose],
    ) -> Result<(String, String)> {
        let key = KeyPair::generate()?;
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        let mut params = CertificateParams::new(names)?;
        params
            .distinguished_name
            .push(DnType::CommonName, common_name);
        params.extended_key_usages = usages.to_vec();
        Ok((
            params.signed_by(&key, &self.issuer)?.pem(),
            key.serialize_pem(),
        ))
    }
}

impl TlsFiles {
    pub fn generate() -> Result<TlsFiles> {
        let dir = tempfile::tempdir()?;
        let write = |name: &str, pem: String| -> Result<PathBuf> {
            let path = dir.path().join(name);
            std::fs::write(&path, pem)?;
            Ok(path)
        };
        let ca = TestCa::new("testbed CA")?;
        let (server_cert, server_key) = ca.issue(
            &["127.0.0.1", "localhost"],
            "etcd server",
            &[ExtendedKeyUsagePurpose::ServerAuth],
        )?;
        let (client_cert, client_key) =
            ca.issue(&[], "etcd client", &[ExtendedKeyUsagePurpose::ClientAuth])?;
        Ok(TlsFiles {
            ca_cert: write("ca.crt", ca.cert_pem.clone())?,
            server_cert: write("server.crt", server_cert)?,
            server_key: write("server.key", server_key)?,
            client_cert: write("client.crt", client_cert)?,
            client_key: write("client.key", client_key)?,
            dir,
        })
    }
}
