//! The CRDs are structural v1 CRDs as far as can be checked offline (the committed YAML is
//! checked against the types by the `crdgen` crate's drift test).

use etcd_api::crds;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, JSONSchemaProps, JSONSchemaPropsOrArray, JSONSchemaPropsOrBool,
};

fn root(crd: &CustomResourceDefinition) -> &JSONSchemaProps {
    crd.spec.versions[0]
        .schema
        .as_ref()
        .and_then(|s| s.open_api_v3_schema.as_ref())
        .expect("every version has a schema")
}

#[test]
fn names_subresources_and_columns() {
    for crd in crds() {
        let names = &crd.spec.names;
        assert_eq!(crd.spec.group, "etcd.database.coreos.com");
        assert_eq!(crd.spec.scope, "Namespaced");
        assert_eq!(names.categories.as_deref(), Some(&["etcd".to_string()][..]));
        let version = &crd.spec.versions[0];
        assert_eq!(version.name, "v1beta2");
        assert!(version.served && version.storage);
        let status = version
            .subresources
            .as_ref()
            .and_then(|s| s.status.as_ref());
        assert!(status.is_some(), "{}: no status subresource", names.kind);
        let columns = version
            .additional_printer_columns
            .as_deref()
            .unwrap_or_default();
        assert_eq!(columns.last().map(|c| c.name.as_str()), Some("Age"));
        for column in columns {
            assert!(
                path_exists(root(&crd), &column.json_path),
                "{}: column {} points at {}, which the schema lacks",
                names.kind,
                column.name,
                column.json_path
            );
        }
    }
    let short: Vec<_> = crds()
        .iter()
        .map(|c| c.spec.names.short_names.clone().unwrap())
        .collect();
    assert_eq!(short, [vec!["eb"], vec!["er"], vec!["etcdc"]]);
}

/// Whether a printer column's path exists in the schema (`.metadata` is always there; a
/// `[?(...)]` filter steps into the array items).
fn path_exists(root: &JSONSchemaProps, json_path: &str) -> bool {
    let mut plain = String::new();
    let mut depth = 0;
    for c in json_path.chars() {
        match c {
            '[' => depth += 1,
            ']' => {
                depth -= 1;
                plain.push_str("[]");
            }
            _ if depth == 0 => plain.push(c),
            _ => {}
        }
    }
    if plain.starts_with(".metadata.") {
        return true;
    }
    let mut node = root;
    for segment in plain.trim_start_matches('.').split('.') {
        let (field, into_items) = match segment.strip_suffix("[]") {
            Some(field) => (field, true),
            None => (segment, false),
        };
        let Some(next) = node.properties.as_ref().and_then(|p| p.get(field)) else {
            return false;
        };
        node = match (into_items, &next.items) {
            (false, _) => next,
            (true, Some(JSONSchemaPropsOrArray::Schema(items))) => items,
            (true, _) => return false,
        };
    }
    true
}

/// Visits every schema node with its path.
fn walk<'a>(path: &str, p: &'a JSONSchemaProps, visit: &mut dyn FnMut(&str, &'a JSONSchemaProps)) {
    visit(path, p);
    for (name, child) in p.properties.iter().flatten() {
        walk(&format!("{path}.{name}"), child, visit);
    }
    if let Some(JSONSchemaPropsOrArray::Schema(items)) = &p.items {
        walk(&format!("{path}[]"), items, visit);
    }
    if let Some(JSONSchemaPropsOrBool::Schema(values)) = &p.additional_properties {
        walk(&format!("{path}{{}}"), values, visit);
    }
}

#[test]
fn schemas_are_structural() {
    for crd in crds() {
        let kind = crd.spec.names.kind.clone();
        walk(&kind, root(&crd), &mut |path, p| {
            let int_or_string = p.x_kubernetes_int_or_string == Some(true);
            let preserve = p.x_kubernetes_preserve_unknown_fields == Some(true);
            assert!(
                p.type_.is_some() || int_or_string || preserve,
                "{path}: no type (not structural)"
            );
            assert!(
                p.ref_path.is_none() && p.definitions.is_none(),
                "{path}: $ref/definitions"
            );
            for branch in [&p.one_of, &p.any_of, &p.all_of]
                .into_iter()
                .flatten()
                .flatten()
            {
                // Structural schemas allow these only as value validation, without types.
                assert!(
                    branch.type_.is_none() || int_or_string,
                    "{path}: typed oneOf/anyOf/allOf branch"
                );
            }
            if p.type_.as_deref() == Some("object") && !preserve {
                assert!(
                    p.properties.is_some() || p.additional_properties.is_some(),
                    "{path}: object without properties would be pruned empty"
                );
            }
            if let (Some(default), Some(min)) = (&p.default, p.min_items) {
                let len = default.0.as_array().map_or(0, Vec::len) as i64;
                assert!(len >= min, "{path}: default violates minItems");
            }
            if let Some(required) = &p.required {
                let props = p.properties.as_ref();
                for r in required {
                    assert!(
                        props.is_some_and(|m| m.contains_key(r)),
                        "{path}: required {r} undefined"
                    );
                }
            }
        });
        assert_eq!(root(&crd).type_.as_deref(), Some("object"));
    }
}

fn rules(crd: &CustomResourceDefinition) -> Vec<String> {
    let mut rules = Vec::new();
    walk("", root(crd), &mut |_, p| {
        rules.extend(
            p.x_kubernetes_validations
                .iter()
                .flatten()
                .map(|r| r.rule.clone()),
        );
    });
    rules
}

#[test]
fn cel_rules_exist() {
    let counts: Vec<usize> = crds().iter().map(|c| rules(c).len()).collect();
    // EtcdBackup: 5 storage + schedule/interval + local path + 2 of s3.serverSideEncryption +
    // 3 of drill + 2 of continuous;
    // EtcdRestore: name + immutable + 5 storage + fromSurvivor's exclusions + local path + the
    // same 2 + pointInTime's backupRef and its one field; EtcdCluster: TLS pairing, quorumLoss's backup. Each is evaluated by a real API
    // server in testbed's tests/cel.rs.
    assert_eq!(counts, [14, 13, 3]);
}

#[test]
fn coreos_json_names_are_kept() {
    let backup = serde_json::to_value(root(&crds()[0])).unwrap();
    let spec = &backup["properties"]["spec"]["properties"];
    for key in [
        "etcdEndpoints",
        "storageType",
        "backupPolicy",
        "s3",
        "abs",
        "gcs",
        "oss",
    ] {
        assert!(spec.get(key).is_some(), "EtcdBackup spec lacks {key}");
    }
    assert!(spec.get("clientTLSSecret").is_some());
    let status = &backup["properties"]["status"]["properties"];
    for key in [
        "succeeded",
        "Reason",
        "etcdVersion",
        "etcdRevision",
        "lastSuccessDate",
    ] {
        assert!(status.get(key).is_some(), "EtcdBackup status lacks {key}");
    }
    let cluster = serde_json::to_value(root(&crds()[2])).unwrap();
    let spec = &cluster["properties"]["spec"]["properties"];
    assert!(spec.get("TLS").is_some());
    let pod = &spec["pod"]["properties"];
    assert!(pod.get("DNSTimeoutInSecond").is_some() && pod.get("ClusterDomain").is_some());
    assert_eq!(spec["size"]["minimum"], 1.0);
    assert_eq!(spec["size"]["maximum"], 7.0);
}
