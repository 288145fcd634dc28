//! MRTR shapes: turning a legacy server request into a modern input request, checking the
//! client's input responses, and the answers the gateway gives a backend on the client's behalf.

use super::caps::Declared;
use crate::jsonrpc::{ErrorObject, INTERNAL_ERROR, INVALID_PARAMS, METHOD_NOT_FOUND};
use serde_json::{Value, json};

/// The kinds of server request a legacy backend can push mid-call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    Elicitation,
    Sampling,
    Roots,
}

impl Kind {
    pub fn from_method(method: &str) -> Option<Kind> {
        match method {
            "elicitation/create" => Some(Kind::Elicitation),
            "sampling/createMessage" => Some(Kind::Sampling),
            "roots/list" => Some(Kind::Roots),
            _ => None,
        }
    }

    pub fn method(&self) -> &'static str {
        match self {
            Kind::Elicitation => "elicitation/create",
            Kind::Sampling => "sampling/createMessage",
            Kind::Roots => "roots/list",
        }
    }

    pub fn as_str(&self) -> &'static str {
        match self {
            Kind::Elicitation => "elicitation",
            Kind::Sampling => "sampling",
            Kind::Roots => "roots",
        }
    }
}

/// Whether an elicitation asks for URL mode (legacy form requests may omit `mode`).
pub fn is_url_elicitation(params: Option<&Value>) -> bool {
    params.and_then(|p| p.get("mode")).and_then(Value::as_str) == Some("url")
}

/// Whether a sampling request is tool-enabled: it offers the model tools, or says how to choose
/// them. Only a client that declared `sampling.tools` may be sent one.
fn uses_tools(params: Option<&Value>) -> bool {
    params.and_then(Value::as_object).is_some_and(|p| {
        p.get("tools").is_some_and(|t| !t.is_null())
            || p.get("toolChoice").is_some_and(|t| !t.is_null())
    })
}

/// Whether this client, in this request, declared what the push needs.
pub fn allowed(declared: &Declared, kind: Kind, params: Option<&Value>) -> bool {
    match kind {
        Kind::Elicitation if is_url_elicitation(params) => declared.elicitation_url,
        Kind::Elicitation => declared.elicitation_form,
        Kind::Sampling => declared.sampling && (declared.sampling_tools || !uses_tools(params)),
        Kind::Roots => declared.roots,
    }
}

/// The modern `{method, params}` for a legacy server request: no `jsonrpc`, no `id`, and none of
/// `_meta`, `task` or `elicitationId`, which belong to the legacy session.
pub fn to_input_request(kind: Kind, params: Option<&Value>) -> Value {
    if kind == Kind::Roots {
        return json!({"method": kind.method()});
    }
    let mut params = params.cloned().unwrap_or_else(|| json!({}));
    if let Some(obj) = params.as_object_mut() {
        obj.remove("_meta");
        obj.remove("task");
        obj.remove("elicitationId");
    }
    json!({"method": kind.method(), "params": params})
}

/// The `InputRequiredResult` a parked call answers with: the round's input requests by key and
/// the sealed state the retry must echo.
pub fn input_required_result<'a>(
    requests: impl IntoIterator<Item = (&'a String, &'a Value)>,
    request_state: String,
) -> Value {
    let requests: serde_json::Map<String, Value> = requests
        .into_iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    json!({
        "resultType": "input_required",
        "inputRequests": requests,
        "requestState": request_state,
    })
}

/// Checks one client input response against the kind it answers.
pub fn validate_response(kind: Kind, value: &Value) -> Result<(), String> {
    let obj = value
        .as_object()
        .ok_or_else(|| format!("a {} response must be an object", kind.as_str()))?;
    match kind {
        Kind::Elicitation => {
            match obj.get("action").and_then(Value::as_str) {
                Some("accept" | "decline" | "cancel") => {}
                Some(other) => return Err(format!("unknown elicitation action `{other}`")),
                None => return Err("an elicitation response needs `action`".into()),
            }
            if obj
                .get("content")
                .is_some_and(|c| !(c.is_object() || c.is_null()))
            {
                return Err("elicitation `content` must be an object".into());
            }
        }
        Kind::Sampling => {
            if !obj.get("role").is_some_and(Value::is_string) {
                return Err("a sampling response needs `role`".into());
            }
            if !obj
                .get("content")
                .is_some_and(|c| c.is_object() || c.is_array())
            {
                return Err("a sampling response needs `content`".into());
            }
            if !obj.get("model").is_some_and(Value::is_string) {
                return Err("a sampling response needs `model`".into());
            }
        }
        Kind::Roots => {
            let roots = obj
                .get("roots")
                .and_then(Value::as_array)
                .ok_or("a roots response needs a `roots` array")?;
            if !roots
                .iter()
                .all(|r| r.get("uri").is_some_and(Value::is_string))
            {
                return Err("every root needs a string `uri`".into());
            }
        }
    }
    Ok(())
}

/// The legacy result for a client's answer: the same object without modern-only fields.
pub fn to_legacy_result(value: &Value) -> Value {
    let mut v = value.clone();
    if let Some(obj) = v.as_object_mut() {
        obj.remove("resultType");
    }
    v
}

/// What the backend hears when the client never answered (abandonment, drain).
pub fn abandoned_answer(kind: Kind) -> Result<Value, ErrorObject> {
    match kind {
        Kind::Elicitation => Ok(json!({"action": "cancel"})),
        _ => Err(ErrorObject::new(
            INTERNAL_ERROR,
            "the client did not answer this request in time",
        )),
    }
}

/// What the backend hears when it pushes something this client did not declare (`allowed` said
/// no): a method the client lacks, or a mode of one it has.
pub fn refused_answer(declared: &Declared, kind: Kind, params: Option<&Value>) -> ErrorObject {
    let (code, what) = match kind {
        Kind::Elicitation if is_url_elicitation(params) => (INVALID_PARAMS, "URL-mode elicitation"),
        Kind::Sampling if declared.sampling => (INVALID_PARAMS, "tool use in sampling"),
        k => (METHOD_NOT_FOUND, k.as_str()),
    };
    ErrorObject::new(code, format!("the client does not support {what}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn input_requests_lose_legacy_session_fields() {
        let params = json!({"mode": "url", "url": "https://x", "message": "m",
            "elicitationId": "e1", "_meta": {"a": 1}, "task": {"ttl": 1}});
        assert_eq!(
            to_input_request(Kind::Elicitation, Some(&params)),
            json!({"method": "elicitation/create", "params": {"mode": "url", "url": "https://x", "message": "m"}})
        );
        assert_eq!(
            to_input_request(Kind::Roots, Some(&json!({"_meta": {}}))),
            json!({"method": "roots/list"})
        );
    }

    #[test]
    fn responses_of_the_wrong_shape_are_refused() {
        assert!(
            validate_response(
                Kind::Elicitation,
                &json!({"action": "accept", "content": {"a": 1}})
            )
            .is_ok()
        );
        assert!(validate_response(Kind::Elicitation, &json!({"action": "maybe"})).is_err());
        assert!(validate_response(Kind::Elicitation, &json!("accept")).is_err());
        assert!(validate_response(Kind::Roots, &json!({})).is_err());
        assert!(validate_response(Kind::Roots, &json!({"roots": [{"name": "x"}]})).is_err());
        assert!(validate_response(Kind::Roots, &json!({"roots": [{"uri": "file:///a"}]})).is_ok());
        assert!(validate_response(Kind::Sampling, &json!({"role": "assistant", "content": {"type": "text", "text": "t"}, "model": "m"})).is_ok());
        assert!(validate_response(Kind::Sampling, &json!({"role": "assistant"})).is_err());
    }

    #[test]
    fn url_elicitation_needs_the_url_capability() {
        let form_only = Declared {
            elicitation_form: true,
            ..Default::default()
        };
        let url = json!({"mode": "url"});
        assert!(allowed(&form_only, Kind::Elicitation, None));
        assert!(!allowed(&form_only, Kind::Elicitation, Some(&url)));
        assert!(!allowed(&form_only, Kind::Sampling, None));
    }

    #[test]
    fn tool_enabled_sampling_needs_sampling_tools() {
        let plain = Declared {
            sampling: true,
            ..Default::default()
        };
        let tools = Declared {
            sampling_tools: true,
            ..plain
        };
        let offered = json!({"messages": [], "tools": [{"name": "t"}]});
        let chosen = json!({"messages": [], "toolChoice": {"mode": "none"}});
        let neither = json!({"messages": [], "tools": null});
        assert!(allowed(&plain, Kind::Sampling, Some(&neither)));
        assert!(!allowed(&plain, Kind::Sampling, Some(&offered)));
        assert!(!allowed(&plain, Kind::Sampling, Some(&chosen)));
        assert!(allowed(&tools, Kind::Sampling, Some(&offered)));
        // The backend hears which part the client lacks.
        let e = refused_answer(&plain, Kind::Sampling, Some(&offered));
        assert_eq!(e.code, INVALID_PARAMS);
        assert!(e.message.contains("tool use in sampling"), "{}", e.message);
        let e = refused_answer(&Declared::default(), Kind::Sampling, Some(&offered));
        assert_eq!(e.code, METHOD_NOT_FOUND);
    }
}
