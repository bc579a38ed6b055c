//! Helpers shared by the integration tests: the coreos AWS Secret for a Garage instance, and an
//! S3 client of the test's own to read back what the operator wrote.

#![allow(dead_code)]

use backup_storage::{Location, S3Options, Store};
use testbed::Garage;

/// The `credentials` and `config` files of a coreos `awsSecret` for `garage`.
pub fn aws_files(garage: &Garage) -> [(&'static str, String); 2] {
    [
        (
            "credentials",
            format!(
                "[default]\naws_access_key_id = {}\naws_secret_access_key = {}\n",
                garage.access_key, garage.secret_key
            ),
        ),
        ("config", format!("[default]\nregion = {}\n", garage.region)),
    ]
}

/// The bucket, opened independently of the operator's code path (static keys).
pub async fn store(garage: &Garage) -> Store {
    let options = S3Options::s3_compatible(
        &garage.endpoint,
        &garage.region,
        &garage.access_key,
        &garage.secret_key,
    );
    let location = Location::S3 {
        bucket: garage.bucket.clone(),
        key: String::new(),
    };
    Store::open(&location, &options).await.unwrap()
}

/// Keys under `prefix`.
pub async fn keys(store: &Store, prefix: &str) -> Vec<String> {
    store
        .list(prefix)
        .await
        .unwrap()
        .into_iter()
        .map(|o| o.key)
        .collect()
}
