//! What the commands share to reach etcd and storage: the connection and upload settings from
//! the flags, and the store a URL names.

use std::time::Duration;

use anyhow::{Context, Result, bail};
use backup_storage::{Location, PartSizer, Store, UploadOptions};
use etcd_snapshot::{EtcdConnection, TlsPem};

use crate::cli::{EtcdArgs, PartArgs, StorageArgs};

pub async fn open(url: &str, args: &StorageArgs) -> Result<(Store, Location)> {
    Ok(args.open(url).await?)
}

fn read(path: &std::path::Path, what: &str) -> Result<Vec<u8>> {
    std::fs::read(path).with_context(|| format!("cannot read the {what} {}", path.display()))
}

/// The etcd connection the flags describe.
pub fn connection(args: &EtcdArgs) -> Result<EtcdConnection> {
    let mut connection = EtcdConnection::new(args.endpoints.clone());
    connection.dial_timeout = Duration::from_secs(args.dial_timeout);
    connection.tls = match (&args.cacert, &args.cert, &args.key) {
        (None, None, None) => None,
        (Some(ca), cert, key) => Some(TlsPem {
            ca: read(ca, "CA bundle")?,
            cert: cert
                .as_deref()
                .map(|p| read(p, "client certificate"))
                .transpose()?,
            key: key.as_deref().map(|p| read(p, "client key")).transpose()?,
        }),
        (None, _, _) => bail!("--cert/--key need --cacert to verify the etcd server"),
    };
    Ok(connection)
}

/// Upload tuning from the flags.
pub fn upload_options(parts: &PartArgs) -> UploadOptions {
    UploadOptions {
        part_sizer: PartSizer::new((parts.part_size_mib as usize) << 20),
        max_in_flight: parts.parts_in_flight as usize,
        ..UploadOptions::default()
    }
}
