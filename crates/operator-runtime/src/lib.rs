//! Process plumbing shared by the operators (`etcd-backup-operator`, `etcd-operator`, and the
//! restore controller): the HTTP server for `/metrics`, `/healthz` and `/readyz` ([`http`]),
//! graceful shutdown on SIGTERM/SIGINT ([`shutdown`]) and leader election on a
//! `coordination.k8s.io/v1` Lease ([`leader`]), and the start-up that ties them together with
//! the flags every operator takes ([`process`]), Events about managed objects ([`events`]) and
//! per-object retry backoff ([`backoff`]) with the reconcile-failure metric every `error_policy` uses
//! ([`reconcile_errors`]); the cron schedules users give ([`cron`]), and the security settings of the pods they make
//! ([`pod_security`]); the shape of the API calls each operator lists for its RBAC tests
//! ([`rbac`]); volume and mount builders ([`volumes`]). Logging set-up is `command_line::init_logging`, shared
//! with the jobs.

pub mod backoff;
pub mod cron;
pub mod events;
pub mod http;
pub mod leader;
pub mod pod_security;
pub mod process;
pub mod rbac;
pub mod reconcile_errors;
pub mod shutdown;
pub mod status_apply;
pub mod tenant_credentials;
pub mod volumes;
