//! Small builders of the volumes and mounts the operators' pods share in shape.

use k8s_openapi::api::core::v1::{SecretVolumeSource, Volume, VolumeMount};

/// A mount of volume `name` at `path`; `readOnly` is set only when true (as written by hand).
pub fn mount(name: &str, path: &str, read_only: bool) -> VolumeMount {
    VolumeMount {
        name: name.into(),
        mount_path: path.into(),
        read_only: read_only.then_some(true),
        ..Default::default()
    }
}

/// The volume `name` of Secret `secret`, its files with `mode` (the API's default, 0644, when
/// `None`).
pub fn secret_volume(name: &str, secret: &str, mode: Option<i32>) -> Volume {
    Volume {
        name: name.into(),
        secret: Some(SecretVolumeSource {
            secret_name: Some(secret.into()),
            default_mode: mode,
            ..Default::default()
        }),
        ..Default::default()
    }
}
