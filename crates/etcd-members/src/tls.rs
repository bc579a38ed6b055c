//! `TLS.static` (coreos): the member peer and server Secrets mounted in every member pod, and the
//! operator Secret whose client certificate the operator uses to reach the members. The Secrets
//! are read (dereferenced) before anything is built, so a missing Secret or key is reported
//! instead of leaving pods that cannot start.

use std::collections::BTreeMap;

use etcd_api::EtcdClusterSpec;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::Api;

/// Keys of each Secret, with coreos's names.
pub const PEER_KEYS: [&str; 3] = ["peer.crt", "peer.key", "peer-ca.crt"];
pub const SERVER_KEYS: [&str; 3] = ["server.crt", "server.key", "server-ca.crt"];
pub const OPERATOR_KEYS: [&str; 3] = ["etcd-client.crt", "etcd-client.key", "etcd-client-ca.crt"];

/// Where member pods mount the peer and server Secrets (coreos's paths).
pub const PEER_DIR: &str = "/etc/etcdtls/member/peer-tls";
pub const SERVER_DIR: &str = "/etc/etcdtls/member/server-tls";

/// The Secret names of `TLS.static`; empty names count as unset.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TlsSecrets {
    pub peer: Option<String>,
    pub server: Option<String>,
    pub operator: Option<String>,
}

impl TlsSecrets {
    pub fn of(spec: &EtcdClusterSpec) -> TlsSecrets {
        let Some(tls) = spec.tls.as_ref().and_then(|t| t.static_tls.as_ref()) else {
            return TlsSecrets::default();
        };
        let name = |n: Option<&String>| n.filter(|n| !n.is_empty()).cloned();
        let member = tls.member.as_ref();
        TlsSecrets {
            peer: name(member.and_then(|m| m.peer_secret.as_ref())),
            server: name(member.and_then(|m| m.server_secret.as_ref())),
            operator: name(tls.operator_secret.as_ref()),
        }
    }

    /// The schema's rule, checked again for servers without CEL.
    pub fn validate(&self) -> Result<(), String> {
        if self.server.is_some() != self.operator.is_some() {
            return Err(
                "TLS.static: operatorSecret and member.serverSecret must be set together".into(),
            );
        }
        Ok(())
    }

    /// Each Secret to read, with the keys it must hold.
    fn required(&self) -> Vec<(&str, &'static [&'static str; 3])> {
        [
            (self.peer.as_deref(), &PEER_KEYS),
            (self.server.as_deref(), &SERVER_KEYS),
            (self.operator.as_deref(), &OPERATOR_KEYS),
        ]
        .into_iter()
        .filter_map(|(name, keys)| Some((name?, keys)))
        .collect()
    }
}

/// The operator's client certificate (PEM), from the operator Secret.
#[derive(Clone)]
pub struct ClientTls {
    pub ca: Vec<u8>,
    pub cert: Vec<u8>,
    pub key: Vec<u8>,
}

impl std::fmt::Debug for ClientTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ClientTls { .. }")
    }
}

/// What reading the Secrets found.
pub enum Dereferenced {
    Ready(Option<ClientTls>),
    /// A Secret or key is missing: what to tell the user.
    Missing(String),
}

/// Reads every Secret `TLS.static` names, in `namespace`.
pub async fn dereference(
    secrets: &Api<Secret>,
    namespace: &str,
    names: &TlsSecrets,
) -> Result<Dereferenced, kube::Error> {
    let mut client = None;
    for (name, keys) in names.required() {
        let Some(secret) = secrets.get_opt(name).await? else {
            return Ok(Dereferenced::Missing(format!(
                "TLS Secret {name} not found in {namespace}"
            )));
        };
        let data = secret.data.unwrap_or_default();
        if let Err(problem) = check_keys(name, &data, keys) {
            return Ok(Dereferenced::Missing(problem));
        }
        if keys == &OPERATOR_KEYS {
            let key = |k: &str| data[k].0.clone();
            client = Some(ClientTls {
                cert: key(OPERATOR_KEYS[0]),
                key: key(OPERATOR_KEYS[1]),
                ca: key(OPERATOR_KEYS[2]),
            });
        }
    }
    Ok(Dereferenced::Ready(client))
}

/// Every key present and not empty.
pub fn check_keys(
    secret: &str,
    data: &BTreeMap<String, ByteString>,
    keys: &[&str],
) -> Result<(), String> {
    let missing: Vec<&str> = keys
        .iter()
        .copied()
        .filter(|k| data.get(*k).is_none_or(|v| v.0.is_empty()))
        .collect();
    if missing.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "TLS Secret {secret} lacks {} (coreos key names: {})",
            missing.join(", "),
            keys.join(", ")
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(yaml: &str) -> EtcdClusterSpec {
        serde_saphyr::from_str(yaml).unwrap()
    }

    #[test]
    fn secret_names_from_a_coreos_manifest() {
        let s = TlsSecrets::of(&spec(
            "size: 3\nTLS:\n  static:\n    member: {peerSecret: p, serverSecret: s}\n    operatorSecret: o\n",
        ));
        assert_eq!(
            s,
            TlsSecrets {
                peer: Some("p".into()),
                server: Some("s".into()),
                operator: Some("o".into())
            }
        );
        assert!(s.validate().is_ok());
        let peer_only =
            TlsSecrets::of(&spec("size: 3\nTLS: {static: {member: {peerSecret: p}}}\n"));
        assert!(peer_only.validate().is_ok());
        let unpaired = TlsSecrets::of(&spec(
            "size: 3\nTLS: {static: {member: {serverSecret: s}}}\n",
        ));
        assert!(unpaired.validate().unwrap_err().contains("together"));
        assert_eq!(TlsSecrets::of(&spec("size: 3\n")), TlsSecrets::default());
    }

    #[test]
    fn missing_or_empty_keys_are_named() {
        let data = BTreeMap::from([
            ("peer.crt".to_string(), ByteString(b"x".to_vec())),
            ("peer.key".to_string(), ByteString(Vec::new())),
        ]);
        let problem = check_keys("p", &data, &PEER_KEYS).unwrap_err();
        assert!(problem.contains("lacks peer.key, peer-ca.crt"), "{problem}");
    }
}
