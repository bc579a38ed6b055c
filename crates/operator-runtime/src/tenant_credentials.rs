//! Which AWS identity an object of a tenant (an EtcdBackup, an EtcdRestore) may act with: only the
//! static keys in the Secret it names. Never the operator's or the node's (the default credential
//! chain: instance role, web identity), unless the operator's deployment opted in
//! (`--allow-ambient-credentials`); never a setting that sources credentials elsewhere (a role to
//! assume with the operator's identity, a program to run).

use thiserror::Error;

#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum CredentialsError {
    /// A line that is not a static key. The line's text is never quoted: a key written with the
    /// wrong separator (`aws_secret_access_key: wJalr...`), or a Secret holding a bare token,
    /// would put the secret into a status, an event and the logs. Only a setting name from
    /// [`KNOWN_SOURCING_SETTINGS`] is named.
    #[error(
        "Secret {secret:?} key {key:?} line {line}: {}; an awsSecret may hold only static keys \
         (aws_access_key_id, aws_secret_access_key, aws_session_token) and region, as `name = value` \
         lines",
        match setting {
            Some(setting) => format!(
                "sets {setting:?}, which makes the AWS SDK source credentials elsewhere (with the \
                 operator's own identity)"
            ),
            None => "is not one of those settings (its text is not shown: it may hold a secret)"
                .to_string(),
        }
    )]
    CredentialSourcing {
        secret: String,
        key: &'static str,
        /// 1-based.
        line: usize,
        /// The setting's name when it is one of [`KNOWN_SOURCING_SETTINGS`].
        setting: Option<String>,
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

/// The AWS shared-file settings that source credentials elsewhere: refused, and named in the
/// refusal (a name from this list cannot be a secret).
pub const KNOWN_SOURCING_SETTINGS: &[&str] = &[
    "role_arn",
    "source_profile",
    "credential_source",
    "credential_process",
    "web_identity_token_file",
    "role_session_name",
    "external_id",
    "mfa_serial",
    "duration_seconds",
    "sso_session",
    "sso_account_id",
    "sso_role_name",
    "sso_region",
    "sso_start_url",
    "sso_registration_scopes",
];

/// Refuses any setting of an AWS shared file (INI: `[profile]`, `key = value`, `#`/`;`
/// comments) outside [`ALLOWED_AWS_SETTINGS`].
pub fn check_settings(secret: &str, key: &'static str, text: &str) -> Result<(), CredentialsError> {
    for (index, line) in text.lines().map(str::trim).enumerate() {
        if line.is_empty() || line.starts_with(['#', ';', '[']) {
            continue;
        }
        let name = line
            .split_once('=')
            .map(|(name, _)| name.trim().to_ascii_lowercase());
        if name
            .as_deref()
            .is_some_and(|n| ALLOWED_AWS_SETTINGS.contains(&n))
        {
            continue;
        }
        let setting = name.filter(|n| KNOWN_SOURCING_SETTINGS.contains(&n.as_str()));
        return Err(CredentialsError::CredentialSourcing {
            secret: secret.to_string(),
            key,
            line: index + 1,
            setting,
        });
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
            Err(CredentialsError::CredentialSourcing { setting, line: 2, .. })
                if setting.as_deref() == Some("role_arn")
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

    /// A secret written with a colon, a bare token, or a value ending in `=` (base64) is
    /// refused without any of its text in the message.
    #[test]
    fn a_refused_line_never_shows_its_text() {
        let secret = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY";
        for text in [
            format!("[default]\naws_access_key_id = AK\naws_secret_access_key: {secret}\n"),
            format!("{secret}\n"),
            format!("{secret}==\n"),
            format!("[default]\n{secret} = x\n"),
        ] {
            let err = check(Some(("aws", Some(&text), None)), false).unwrap_err();
            let shown = format!("{err} {err:?}");
            assert!(!shown.contains("wJalr"), "{shown}");
            assert!(
                shown.contains("Secret \"aws\" key \"credentials\" line"),
                "{shown}"
            );
        }
    }
}
