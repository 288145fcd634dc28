//! The engine's error mapping and request digest, checked without a backend.

use super::*;
use serde_json::json;

#[test]
fn backend_error_codes_as_2026_07_28_allows_them() {
    let code = |c: i64| backend_error(ErrorObject::new(c, "m")).code;
    assert_eq!(code(jsonrpc::LEGACY_RESOURCE_NOT_FOUND), INVALID_PARAMS);
    assert_eq!(code(-32050), jsonrpc::INTERNAL_ERROR);
    assert_eq!(code(-32020), jsonrpc::INTERNAL_ERROR);
    assert_eq!(code(-32099), jsonrpc::INTERNAL_ERROR);
    assert_eq!(code(-32019), -32019);
    assert_eq!(code(-32100), -32100);
    assert_eq!(code(-32601), -32601);
}

#[test]
fn backend_missing_capability_passes_only_when_it_names_them() {
    let code = |data: Value| {
        backend_error(ErrorObject::new(jsonrpc::MISSING_CLIENT_CAPABILITY, "m").with_data(data))
            .code
    };
    let needs = json!({"requiredCapabilities": {"roots": {}}});
    assert_eq!(code(needs), jsonrpc::MISSING_CLIENT_CAPABILITY);
    let other = json!({"requiredCapabilities": ["roots"]});
    assert_eq!(code(other), jsonrpc::INTERNAL_ERROR);
    assert_eq!(code(json!({"roots": {}})), jsonrpc::INTERNAL_ERROR);
    assert_eq!(code(json!(null)), jsonrpc::INTERNAL_ERROR);
    let bare = ErrorObject::new(jsonrpc::MISSING_CLIENT_CAPABILITY, "m");
    assert_eq!(backend_error(bare).code, jsonrpc::INTERNAL_ERROR);
}

#[test]
fn request_digest_is_the_sha256_of_the_canonical_object_of_its_fields() {
    let params: Map<String, Value> = serde_json::from_str(
        r#"{"name":"t","arguments":{"b":[1,{"z":null,"a":"é\n"}],"a":1.5},"_meta":{"x":1}}"#,
    )
    .unwrap();
    let object = json!({
        "method": "tools/call",
        "name": params.get("name"),
        "uri": params.get("uri"),
        "arguments": params.get("arguments"),
    });
    assert_eq!(
        Bridge::request_digest("tools/call", &params),
        seal::digest(&serde_json::to_vec(&object).unwrap())
    );
}

#[test]
fn request_digest_ignores_key_order_and_meta() {
    let a: Map<String, Value> =
        serde_json::from_str(r#"{"name":"t","arguments":{"x":1,"y":[1,2]},"_meta":{"a":1}}"#)
            .unwrap();
    let b: Map<String, Value> =
        serde_json::from_str(r#"{"arguments":{"y":[1,2],"x":1},"name":"t"}"#).unwrap();
    let c: Map<String, Value> =
        serde_json::from_str(r#"{"arguments":{"y":[2,1],"x":1},"name":"t"}"#).unwrap();
    assert_eq!(
        Bridge::request_digest("tools/call", &a),
        Bridge::request_digest("tools/call", &b)
    );
    assert_ne!(
        Bridge::request_digest("tools/call", &a),
        Bridge::request_digest("tools/call", &c)
    );
    assert_ne!(
        Bridge::request_digest("tools/call", &a),
        Bridge::request_digest("prompts/get", &a)
    );
}
