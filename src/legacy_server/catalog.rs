//! The prompts and resources this server offers. Both have one entry that elicits while the
//! request is being handled, so the gateway's handling of nested requests can be exercised
//! outside `tools/call` too.

use serde_json::{Value, json};

use super::asks::{self, AskError};
use super::session::Ctx;
use super::wire::{INTERNAL_ERROR, RESOURCE_NOT_FOUND, RpcError};

const INFO_URI: &str = "fixture://info";
const SECRET_URI: &str = "fixture://secret";
const SECRET_PASSWORD: &str = "open-sesame";

pub(crate) fn list_prompts() -> Value {
    json!({"prompts": [{
        "name": "greet",
        "description": "Greets the user by name, asking for the name first.",
        "arguments": [{
            "name": "greeting",
            "description": "Greeting word to use (default: Hello)",
            "required": false,
        }],
    }]})
}

/// Runs a form elicitation whose absence should degrade gracefully: a client that cannot be
/// asked is treated like a user who declined. Client errors still fail the request.
async fn ask_or_decline(
    ctx: &Ctx,
    message: &str,
    field: &str,
    description: &str,
) -> Result<Option<String>, RpcError> {
    let schema = asks::single_string_schema(field, description);
    match asks::ask_form(ctx, message, schema).await {
        Ok(outcome) => Ok(outcome.accepted_str(field).map(str::to_owned)),
        Err(AskError::Unavailable(reason)) => {
            tracing::debug!(%reason, "not eliciting");
            Ok(None)
        }
        Err(err) => Err(RpcError::new(
            INTERNAL_ERROR,
            format!("elicitation failed: {err}"),
        )),
    }
}

pub(crate) async fn get_prompt(ctx: &Ctx, params: &Value) -> Result<Value, RpcError> {
    let name = params
        .get("name")
        .and_then(Value::as_str)
        .ok_or_else(|| RpcError::invalid_params("prompts/get needs a `name` string"))?;
    if name != "greet" {
        return Err(RpcError::invalid_params(format!("Unknown prompt: {name}")));
    }
    let greeting = params
        .pointer("/arguments/greeting")
        .and_then(Value::as_str)
        .filter(|g| !g.is_empty())
        .unwrap_or("Hello");
    let who = ask_or_decline(ctx, "Who should be greeted?", "name", "Your name")
        .await?
        .unwrap_or_else(|| "stranger".to_owned());
    Ok(json!({
        "description": "A personal greeting",
        "messages": [{
            "role": "user",
            "content": {"type": "text", "text": format!("{greeting}, {who}")},
        }],
    }))
}

pub(crate) fn list_resources() -> Value {
    json!({"resources": [
        {
            "uri": INFO_URI,
            "name": "info",
            "description": "What this server is",
            "mimeType": "text/plain",
        },
        {
            "uri": SECRET_URI,
            "name": "secret",
            "description": "Readable after giving the password",
            "mimeType": "text/plain",
        },
    ]})
}

pub(crate) fn list_resource_templates() -> Value {
    json!({"resourceTemplates": []})
}

pub(crate) async fn read_resource(ctx: &Ctx, params: &Value) -> Result<Value, RpcError> {
    let uri = params
        .get("uri")
        .and_then(Value::as_str)
        .ok_or_else(|| RpcError::invalid_params("resources/read needs a `uri` string"))?;
    let text = match uri {
        INFO_URI => "legacy demo server",
        SECRET_URI => {
            let password =
                ask_or_decline(ctx, "Password for the secret", "password", "The password").await?;
            if password.as_deref() == Some(SECRET_PASSWORD) {
                "unlocked"
            } else {
                "locked"
            }
        }
        _ => {
            return Err(RpcError::new(RESOURCE_NOT_FOUND, "Resource not found")
                .with_data(json!({"uri": uri})));
        }
    };
    Ok(json!({"contents": [{"uri": uri, "mimeType": "text/plain", "text": text}]}))
}
