//! The shape in which each operator lists every Kubernetes API call it makes, so its manifests
//! test can check that the RBAC rules under `deploy/` grant exactly these.

/// `(apiGroup, resource, verb)`.
pub type ApiCall = (&'static str, &'static str, &'static str);
