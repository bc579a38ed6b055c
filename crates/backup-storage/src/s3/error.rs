use aws_sdk_s3::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};
use aws_smithy_runtime_api::http::Response;

use crate::StorageError;

/// What to check when S3 rejects the credentials.
const S3_CREDENTIALS: &str = "the access key, secret and region";

/// Turns an SDK error into the cause a user can act on.
pub(super) fn classify<E>(
    err: SdkError<E, Response>,
    operation: &'static str,
    url: &str,
    bucket: &str,
    endpoint: &str,
) -> StorageError
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
{
    let detail = DisplayErrorContext(&err).to_string();
    match &err {
        SdkError::DispatchFailure(failure) => {
            let lower = detail.to_lowercase();
            if lower.contains("certificate") || lower.contains("tls") || lower.contains("handshake")
            {
                StorageError::Tls {
                    service: "S3",
                    endpoint: endpoint.to_string(),
                    message: detail,
                }
            } else if failure.is_io() || failure.is_timeout() {
                StorageError::Unreachable {
                    service: "S3",
                    endpoint: endpoint.to_string(),
                    message: detail,
                }
            } else if lower.contains("credentials") {
                StorageError::NoCredentials {
                    service: "S3",
                    message: detail,
                }
            } else {
                other(operation, url, detail)
            }
        }
        SdkError::TimeoutError(_) => StorageError::Unreachable {
            service: "S3",
            endpoint: endpoint.to_string(),
            message: format!("{operation} timed out"),
        },
        SdkError::ConstructionFailure(_) if detail.to_lowercase().contains("credentials") => {
            StorageError::NoCredentials {
                service: "S3",
                message: detail,
            }
        }
        SdkError::ServiceError(service) => {
            let status = service.raw().status().as_u16();
            let code = service.err().code().unwrap_or_default().to_string();
            let message = service.err().message().unwrap_or_default().to_string();
            from_service(operation, url, bucket, status, code, message)
        }
        _ => other(operation, url, detail),
    }
}

fn other(operation: &'static str, url: &str, message: String) -> StorageError {
    StorageError::S3 {
        operation,
        url: url.to_string(),
        message,
    }
}

/// Maps S3 error codes (and bare HTTP statuses, which HEAD responses carry) to causes.
fn from_service(
    operation: &'static str,
    url: &str,
    bucket: &str,
    status: u16,
    code: String,
    message: String,
) -> StorageError {
    // Garage answers a bad key or signature with AccessDenied and this wording.
    let bad_key = message.contains("No such key") || message.to_lowercase().contains("signature");
    match (code.as_str(), status) {
        ("NoSuchBucket", _) => StorageError::NoSuchBucket {
            bucket: bucket.to_string(),
        },
        (
            "InvalidAccessKeyId"
            | "SignatureDoesNotMatch"
            | "InvalidToken"
            | "ExpiredToken"
            | "AuthorizationHeaderMalformed"
            | "InvalidSignature",
            _,
        ) => StorageError::Credentials {
            service: "S3",
            code,
            message,
            check: S3_CREDENTIALS,
        },
        ("AccessDenied" | "Forbidden", _) if bad_key => StorageError::Credentials {
            service: "S3",
            code,
            message,
            check: S3_CREDENTIALS,
        },
        ("AccessDenied", _) | (_, 403) => StorageError::AccessDenied {
            bucket: bucket.to_string(),
            code: if code.is_empty() {
                "HTTP 403".into()
            } else {
                code
            },
            message,
        },
        // The object appeared or changed after the caller looked (a conditional write).
        ("PreconditionFailed" | "ConditionalRequestConflict", _) | (_, 412) => {
            StorageError::PreconditionFailed {
                url: url.to_string(),
            }
        }
        ("NoSuchUpload", _) => StorageError::NotFound {
            url: format!("{url} (multipart upload)"),
        },
        ("NoSuchKey" | "NotFound", _) | ("", 404) => StorageError::NotFound {
            url: url.to_string(),
        },
        _ => StorageError::S3 {
            operation,
            url: url.to_string(),
            message: format!("{code} (HTTP {status}): {message}"),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(status: u16, code: &str, message: &str) -> StorageError {
        from_service("Op", "s3://b/k", "b", status, code.into(), message.into())
    }

    #[test]
    fn codes_map_to_causes() {
        assert!(matches!(
            map(404, "NoSuchBucket", ""),
            StorageError::NoSuchBucket { .. }
        ));
        assert!(matches!(
            map(403, "InvalidAccessKeyId", ""),
            StorageError::Credentials { .. }
        ));
        assert!(matches!(
            map(403, "AccessDenied", "Forbidden: No such key: GK123"),
            StorageError::Credentials { .. }
        ));
        assert!(matches!(
            map(403, "AccessDenied", "policy"),
            StorageError::AccessDenied { .. }
        ));
        assert!(matches!(
            map(403, "", ""),
            StorageError::AccessDenied { .. }
        ));
        assert!(matches!(map(404, "", ""), StorageError::NotFound { .. }));
        for (status, code) in [
            (412, "PreconditionFailed"),
            (409, "ConditionalRequestConflict"),
        ] {
            assert!(matches!(
                map(status, code, ""),
                StorageError::PreconditionFailed { .. }
            ));
        }
        assert!(matches!(
            map(500, "InternalError", "boom"),
            StorageError::S3 { .. }
        ));
    }

    #[test]
    fn messages_name_the_cause() {
        let msg = map(404, "NoSuchBucket", "").to_string();
        assert_eq!(msg, "bucket \"b\" does not exist");
        let msg = map(403, "SignatureDoesNotMatch", "bad sig").to_string();
        assert!(msg.contains("rejected the credentials"), "{msg}");
    }
}
