//! Which AWS identity an object of a tenant (an EtcdBackup, an EtcdRestore) may act with: only the
//! static keys in the Secret it names. Never the operator's or the node's (the default credential
//! chain: instance role, web identity), unless the operator's deployment opted in
//! (`--allow-ambient-credentials`); never a setting that sources credentials elsewhere (a role to
//! assume with the operator's identity, a program to run).

use thiserror::Error;

#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum CredentialsError {
    #[error(
        "Secret {secret:?} key {key:?} sets {setting:?}, which makes the AWS SDK source credentials \
         elsewhere (with the operator's own identity); an awsSecret may hold only static keys \
         (aws_access_key_id, aws_secret_access_key, aws_session_token) and region"
    )]
    CredentialSourcing {
        secret: String,
        key: &'static str,
        setting: String,
    },
    #[error(
        "no AWS keys ({0}): the operator does not lend its own AWS identity (nor the node's) to \
         the objects it serves unless started with --allow-ambient-credentials"
    )]
    NoCredentials(String),
}

/// What a tenant's `aws` Secret may set in its `credentials` and `config` files. Everything
/// else either sources credentials elsewhere (role_arn, source_profile, credential_source,
/// credential_process, web_identity_token_file, sso_*), which would act with the operator's own
/// identity or run a program, or is not needed.
const ALLOWED_AWS_SETTINGS: &[&str] = &[
    "aws_access_key_id",
    "aws_secret_access_key",
    "aws_session_token",
    "region",
    "output",
];

/// Refuses any setting of an AWS shared file (INI: `[profile]`, `key = value`, `#`/`;`
/// comments) outside [`ALLOWED_AWS_SETTINGS`].
pub fn check_settings(secret: &str, key: &'static str, text: &str) -> Result<(), CredentialsError> {
    for line in text.lines().map(str::trim) {
        if line.is_empty() || line.starts_with(['#', ';', '[']) {
            continue;
        }
        let setting = line.split('=').next().unwrap_or_default().trim();
        if !ALLOWED_AWS_SETTINGS.contains(&setting.to_ascii_lowercase().as_str()) {
            return Err(CredentialsError::CredentialSourcing {
                secret: secret.to_string(),
                key,
                setting: setting.to_string(),
            });
        }
    }
    Ok(())
}

/// Checks what an object may act with: `secret` is the name of the Secret it names and its
/// `credentials` and `config` files (`None` without a Secret). Without keys, only an operator
/// started with `allow_ambient` lends the ambient identity.
pub fn check(
    secret: Option<(&str, Option<&str>, Option<&str>)>,
    allow_ambient: bool,
) -> Result<(), CredentialsError> {
    let Some((name, credentials, config)) = secret else {
        return match allow_ambient {
            true => Ok(()),
            false => Err(CredentialsError::NoCredentials("no awsSecret".into())),
        };
    };
    if credentials.is_none() && !allow_ambient {
        let why = format!("Secret {name:?} has no \"credentials\" file");
        return Err(CredentialsError::NoCredentials(why));
    }
    for (key, file) in [("credentials", credentials), ("config", config)] {
        if let Some(file) = file {
            check_settings(name, key, file)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEYS: &str = "[default]\naws_access_key_id = AK\naws_secret_access_key = SK\n";

    #[test]
    fn only_static_keys_unless_the_operator_opted_in() {
        assert_eq!(check(Some(("aws", Some(KEYS), None)), false), Ok(()));
        assert!(matches!(
            check(None, false),
            Err(CredentialsError::NoCredentials(why)) if why == "no awsSecret"
        ));
        assert_eq!(check(None, true), Ok(()));
        // A config that assumes a role with whatever identity the pod finds.
        let role = "[default]\nrole_arn = arn:aws:iam::1:role/x\ncredential_source = Ec2InstanceMetadata\n";
        assert!(matches!(
            check(Some(("aws", None, Some(role))), false),
            Err(CredentialsError::NoCredentials(_))
        ));
        assert!(matches!(
            check(Some(("aws", None, Some(role))), true),
            Err(CredentialsError::CredentialSourcing { setting, .. }) if setting == "role_arn"
        ));
        let process = "[default]\ncredential_process = /bin/steal\n";
        assert!(matches!(
            check(Some(("aws", Some(process), None)), false),
            Err(CredentialsError::CredentialSourcing {
                key: "credentials",
                ..
            })
        ));
        let region = "# comment\n[profile x]\nregion = eu-west-1\n";
        assert_eq!(
            check(Some(("aws", Some(KEYS), Some(region))), false),
            Ok(())
        );
    }
}
