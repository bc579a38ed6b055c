//! The body of a server-side apply of an object's status: its typed status (or the part of it
//! one field manager owns) under the object's kind. A manager's apply must carry every field it
//! owns: the API server drops the ones it leaves out.

use kube::Resource;
use serde::Serialize;

/// `{"apiVersion": .., "kind": .., "status": status}` for objects of kind `K`.
pub fn body<K, S>(status: &S) -> serde_json::Value
where
    K: Resource<DynamicType = ()>,
    S: Serialize,
{
    serde_json::json!({
        "apiVersion": K::api_version(&()),
        "kind": K::kind(&()),
        "status": status,
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_status_goes_under_the_kind() {
        let body =
            super::body::<k8s_openapi::api::core::v1::Pod, _>(&serde_json::json!({"phase": "x"}));
        assert_eq!(
            body,
            serde_json::json!({"apiVersion": "v1", "kind": "Pod", "status": {"phase": "x"}})
        );
    }
}
