//! The CRD objects. Their YAML form (`crds/`) is written by the `crdgen` crate, so this crate
//! needs no YAML library.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;

use crate::{EtcdBackup, EtcdCluster, EtcdRestore};

/// The three CRDs, with their CEL rules.
pub fn crds() -> Vec<CustomResourceDefinition> {
    vec![EtcdBackup::crd(), EtcdRestore::crd(), EtcdCluster::crd()]
}
