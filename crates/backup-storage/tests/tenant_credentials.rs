//! A tenant's `credentials` file is the only source of keys: when it holds none, or wrong ones,
//! requests fail instead of falling through to the identity of the process (here, valid keys in
//! its environment, as an operator's IRSA or instance profile would be). Its own test binary:
//! it sets environment variables.

use backup_storage::{Location, S3Credentials, S3Options, Store};
use testbed::Garage;

async fn put_with(garage: &Garage, credentials: &str) -> Result<(), String> {
    let options = S3Options {
        max_attempts: 1,
        credentials: S3Credentials::SharedFiles {
            credentials: Some(credentials.to_string()),
            config: None,
            profile: None,
        },
        ..S3Options::s3_compatible(&garage.endpoint, &garage.region, "", "")
    };
    let location = Location::S3 {
        bucket: garage.bucket.clone(),
        key: String::new(),
    };
    let store = Store::open(&location, &options)
        .await
        .map_err(|e| e.to_string())?;
    store
        .put_small("tenant/probe", "x".into(), "text/plain")
        .await
        .map_err(|e| e.to_string())
}

#[tokio::test]
async fn a_tenant_file_never_falls_back_to_the_process_identity() {
    let garage = Garage::start().await.unwrap();
    // The process's own, valid identity: what the default chain would find first.
    // SAFETY: the only test of this binary; no other thread reads the environment meanwhile.
    unsafe {
        std::env::set_var("AWS_ACCESS_KEY_ID", &garage.access_key);
        std::env::set_var("AWS_SECRET_ACCESS_KEY", &garage.secret_key);
    }
    let good = format!(
        "[default]\naws_access_key_id = {}\naws_secret_access_key = {}\n",
        garage.access_key, garage.secret_key
    );
    put_with(&garage, &good)
        .await
        .expect("the file's own keys work");

    let no_keys = put_with(&garage, "[default]\nregion = garage\n").await;
    let error = no_keys.expect_err("a file without keys must not borrow the environment's");
    assert!(error.to_lowercase().contains("credentials"), "{error}");

    let wrong = "[default]\naws_access_key_id = GKwrong\naws_secret_access_key = wrong\n";
    let error = put_with(&garage, wrong)
        .await
        .expect_err("the file's wrong keys are used, not the environment's");
    assert!(!error.is_empty());
}
