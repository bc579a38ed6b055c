//! The CRD objects, and a CEL-free variant. Their YAML form (`crds/`) is written by the `crdgen`
//! crate, so this crate needs no YAML library.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, JSONSchemaProps, JSONSchemaPropsOrArray, JSONSchemaPropsOrBool,
};
use kube::CustomResourceExt;

use crate::{EtcdBackup, EtcdCluster, EtcdRestore};

/// The three CRDs, with CEL rules (Kubernetes 1.25 and later).
pub fn crds() -> Vec<CustomResourceDefinition> {
    vec![EtcdBackup::crd(), EtcdRestore::crd(), EtcdCluster::crd()]
}

/// The CRD without `x-kubernetes-validations`, for API servers without CEL (Kubernetes 1.20 to
/// 1.24), which reject or drop the field. The controllers repeat those checks (`validate()`).
pub fn strip_cel(mut crd: CustomResourceDefinition) -> CustomResourceDefinition {
    for version in &mut crd.spec.versions {
        if let Some(schema) = version
            .schema
            .as_mut()
            .and_then(|s| s.open_api_v3_schema.as_mut())
        {
            strip_props(schema);
        }
    }
    crd
}

fn strip_props(p: &mut JSONSchemaProps) {
    p.x_kubernetes_validations = None;
    let children = p
        .properties
        .iter_mut()
        .flat_map(|m| m.values_mut())
        .chain(p.pattern_properties.iter_mut().flat_map(|m| m.values_mut()))
        .chain(p.definitions.iter_mut().flat_map(|m| m.values_mut()))
        .chain(p.all_of.iter_mut().flatten())
        .chain(p.any_of.iter_mut().flatten())
        .chain(p.one_of.iter_mut().flatten())
        .chain(p.not.as_deref_mut());
    children.for_each(strip_props);
    match &mut p.items {
        Some(JSONSchemaPropsOrArray::Schema(s)) => strip_props(s),
        Some(JSONSchemaPropsOrArray::Schemas(v)) => v.iter_mut().for_each(strip_props),
        None => {}
    }
    for extra in [&mut p.additional_properties, &mut p.additional_items] {
        if let Some(JSONSchemaPropsOrBool::Schema(s)) = extra {
            strip_props(s);
        }
    }
}
