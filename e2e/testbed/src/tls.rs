use std::path::PathBuf;

use anyhow::Result;
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
};

/// A CA, a server certificate for 127.0.0.1/localhost and a client certificate, as PEM files.
pub struct TlsFiles {
    pub dir: tempfile::TempDir,
    pub ca_cert: PathBuf,
    pub server_cert: PathBuf,
    pub server_key: PathBuf,
    pub client_cert: PathBuf,
    pub client_key: PathBuf,
}

impl TlsFiles {
    pub fn generate() -> Result<TlsFiles> {
        let dir = tempfile::tempdir()?;
        let write = |name: &str, pem: String| -> Result<PathBuf> {
            let path = dir.path().join(name);
            std::fs::write(&path, pem)?;
            Ok(path)
        };

        let ca_key = KeyPair::generate()?;
        let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(DnType::CommonName, "testbed CA");
        let ca_cert = ca_params.self_signed(&ca_key)?;
        let ca = Issuer::new(ca_params, ca_key);

        let leaf = |names: Vec<String>,
                    cn: &str,
                    usage: ExtendedKeyUsagePurpose|
         -> Result<(String, String)> {
            let key = KeyPair::generate()?;
            let mut params = CertificateParams::new(names)?;
            params.distinguished_name.push(DnType::CommonName, cn);
            params.extended_key_usages = vec![usage];
            Ok((params.signed_by(&key, &ca)?.pem(), key.serialize_pem()))
        };
        let (server_cert, server_key) = leaf(
            vec!["127.0.0.1".into(), "localhost".into()],
            "etcd server",
            ExtendedKeyUsagePurpose::ServerAuth,
        )?;
        let (client_cert, client_key) =
            leaf(vec![], "etcd client", ExtendedKeyUsagePurpose::ClientAuth)?;
        Ok(TlsFiles {
            ca_cert: write("ca.crt", ca_cert.pem())?,
            server_cert: write("server.crt", server_cert)?,
            server_key: write("server.key", server_key)?,
            client_cert: write("client.crt", client_cert)?,
            client_key: write("client.key", client_key)?,
            dir,
        })
    }
}
