//! The requests this server sends to its client (`elicitation/create`,
//! `sampling/createMessage`, `roots/list`), shaped for the negotiated protocol revision and
//! sent only when the client declared the matching capability.
//!
//! Each ask is split into a synchronous `start_*` (checks the gates, sends the request) and
//! an async `finish_*` (awaits and parses the answer), so a handler can have several requests
//! outstanding at once.

use serde_json::{Value, json};

use super::session::{Ctx, Outstanding};
use super::wire::RpcError;

/// Why an ask produced no usable answer. The `Display` text is what tools report.
#[derive(Debug, thiserror::Error)]
pub(crate) enum AskError {
    /// The client answered with a JSON-RPC error (`error <code>: <message>`).
    #[error("{0}")]
    Client(RpcError),
    /// The negotiated version or the client's capabilities rule the request out.
    #[error("{0}")]
    Unavailable(String),
    #[error("malformed {method} result from the client: {detail}")]
    Malformed {
        method: &'static str,
        detail: String,
    },
    #[error("the session closed before the client answered")]
    Closed,
}

const FORM_SINCE: &str = "2025-06-18";
const URL_SINCE: &str = "2025-11-25";
const SAMPLING_TOOLS_SINCE: &str = "2025-11-25";

fn unavailable_for_version(ctx: &Ctx, what: &str, since: &str) -> AskError {
    AskError::Unavailable(format!(
        "{what} needs protocol {since} or later, but this session negotiated {}",
        ctx.version()
    ))
}

fn missing_capability(what: &str) -> AskError {
    AskError::Unavailable(format!("the client did not declare the {what} capability"))
}

/// The elicitation modes the client declared: an object without mode keys means form only,
/// which is how clients predating URL mode declare elicitation.
fn elicitation_modes(ctx: &Ctx) -> (bool, bool) {
    if ctx.shared.opts.ignore_capabilities {
        return (true, true);
    }
    match ctx.shared.client_capabilities().get("elicitation") {
        None | Some(Value::Null) => (false, false),
        Some(Value::Object(modes)) => {
            let url = modes.contains_key("url");
            (modes.contains_key("form") || !url, url)
        }
        Some(_) => (true, false),
    }
}

fn has_capability(ctx: &Ctx, name: &str) -> bool {
    ctx.shared.opts.ignore_capabilities
        || !matches!(
            ctx.shared.client_capabilities().get(name),
            None | Some(Value::Null)
        )
}

pub(crate) fn require_form(ctx: &Ctx) -> Result<(), AskError> {
    if !ctx.at_least(FORM_SINCE) {
        return Err(unavailable_for_version(ctx, "elicitation", FORM_SINCE));
    }
    if !elicitation_modes(ctx).0 {
        return Err(missing_capability("`elicitation` (form mode)"));
    }
    Ok(())
}

pub(crate) fn require_url(ctx: &Ctx) -> Result<(), AskError> {
    if !ctx.at_least(URL_SINCE) {
        return Err(unavailable_for_version(
            ctx,
            "URL-mode elicitation",
            URL_SINCE,
        ));
    }
    if !elicitation_modes(ctx).1 {
        return Err(missing_capability("`elicitation.url`"));
    }
    Ok(())
}

pub(crate) fn require_sampling(ctx: &Ctx) -> Result<(), AskError> {
    if has_capability(ctx, "sampling") {
        Ok(())
    } else {
        Err(missing_capability("`sampling`"))
    }
}

/// Tool use in sampling: `sampling.tools` declared (2025-11-25 on).
fn require_sampling_tools(ctx: &Ctx) -> Result<(), AskError> {
    if !ctx.at_least(SAMPLING_TOOLS_SINCE) {
        return Err(unavailable_for_version(
            ctx,
            "tool use in sampling",
            SAMPLING_TOOLS_SINCE,
        ));
    }
    let declared = ctx
        .shared
        .client_capabilities()
        .get("sampling")
        .and_then(|s| s.get("tools"))
        .is_some_and(Value::is_object);
    if declared || ctx.shared.opts.ignore_capabilities {
        Ok(())
    } else {
        Err(missing_capability("`sampling.tools`"))
    }
}

pub(crate) fn require_roots(ctx: &Ctx) -> Result<(), AskError> {
    if has_capability(ctx, "roots") {
        Ok(())
    } else {
        Err(missing_capability("`roots`"))
    }
}

/// A flat form asking for one required string field.
pub(crate) fn single_string_schema(field: &str, description: &str) -> Value {
    json!({
        "type": "object",
        "properties": {field: {"type": "string", "description": description}},
        "required": [field],
    })
}

/// The user's answer to an elicitation.
#[derive(Debug, Clone)]
pub(crate) struct ElicitOutcome {
    pub action: String,
    pub content: Option<Value>,
}

impl ElicitOutcome {
    pub(crate) fn to_json(&self) -> Value {
        json!({"action": self.action, "content": self.content})
    }

    /// A string field of the submitted form, if the user accepted.
    pub(crate) fn accepted_str(&self, field: &str) -> Option<&str> {
        if self.action != "accept" {
            return None;
        }
        self.content.as_ref()?.get(field)?.as_str()
    }
}

pub(crate) fn start_form(ctx: &Ctx, message: &str, schema: Value) -> Result<Outstanding, AskError> {
    require_form(ctx)?;
    let mut params = json!({"message": message, "requestedSchema": schema});
    // `mode` arrived with URL mode in 2025-11-25; earlier revisions only know forms.
    if ctx.at_least(URL_SINCE) {
        params["mode"] = "form".into();
    }
    Ok(ctx.send_request("elicitation/create", params))
}

pub(crate) fn start_url(
    ctx: &Ctx,
    message: &str,
    elicitation_id: &str,
    url: &str,
) -> Result<Outstanding, AskError> {
    require_url(ctx)?;
    let params = json!({
        "mode": "url",
        "elicitationId": elicitation_id,
        "url": url,
        "message": message,
    });
    Ok(ctx.send_request("elicitation/create", params))
}

pub(crate) async fn finish_elicit(pending: Outstanding) -> Result<ElicitOutcome, AskError> {
    let result = pending.reply().await?;
    let malformed = |detail: &str| AskError::Malformed {
        method: "elicitation/create",
        detail: detail.to_owned(),
    };
    let action = match result.get("action").and_then(Value::as_str) {
        Some(action @ ("accept" | "decline" | "cancel")) => action.to_owned(),
        Some(other) => return Err(malformed(&format!("unknown action {other:?}"))),
        None => return Err(malformed("missing `action`")),
    };
    let content = result.get("content").filter(|c| !c.is_null()).cloned();
    Ok(ElicitOutcome { action, content })
}

pub(crate) async fn ask_form(
    ctx: &Ctx,
    message: &str,
    schema: Value,
) -> Result<ElicitOutcome, AskError> {
    finish_elicit(start_form(ctx, message, schema)?).await
}

/// The parts of a sampling result the tools report.
#[derive(Debug, Clone)]
pub(crate) struct SampleOutcome {
    pub role: Value,
    pub text: Value,
    pub model: Value,
}

impl SampleOutcome {
    pub(crate) fn to_json(&self) -> Value {
        json!({"role": self.role, "text": self.text, "model": self.model})
    }
}

/// Asks the client's model to complete `prompt`; `with_tools` offers it a tool as well (a
/// tool-enabled sampling request).
pub(crate) fn start_sample(
    ctx: &Ctx,
    prompt: &str,
    with_tools: bool,
) -> Result<Outstanding, AskError> {
    require_sampling(ctx)?;
    let mut params = json!({
        "messages": [{"role": "user", "content": {"type": "text", "text": prompt}}],
        "maxTokens": 64,
    });
    if with_tools {
        require_sampling_tools(ctx)?;
        params["tools"] = json!([{
            "name": "lookup",
            "description": "Looks a word up.",
            "inputSchema": {"type": "object", "properties": {"word": {"type": "string"}}},
        }]);
        params["toolChoice"] = json!({"mode": "auto"});
    }
    Ok(ctx.send_request("sampling/createMessage", params))
}

pub(crate) async fn finish_sample(pending: Outstanding) -> Result<SampleOutcome, AskError> {
    let result = pending.reply().await?;
    if !result.is_object() {
        return Err(AskError::Malformed {
            method: "sampling/createMessage",
            detail: "result is not an object".to_owned(),
        });
    }
    // 2025-11-25 allows an array of content blocks; report the first text block.
    let text = match result.get("content") {
        Some(Value::Array(blocks)) => blocks
            .iter()
            .find(|b| b.get("type").and_then(Value::as_str) == Some("text"))
            .and_then(|b| b.get("text")),
        Some(block) => block.get("text"),
        None => None,
    };
    Ok(SampleOutcome {
        role: result.get("role").cloned().unwrap_or(Value::Null),
        text: text.cloned().unwrap_or(Value::Null),
        model: result.get("model").cloned().unwrap_or(Value::Null),
    })
}

pub(crate) fn start_roots(ctx: &Ctx) -> Result<Outstanding, AskError> {
    require_roots(ctx)?;
    Ok(ctx.send_request("roots/list", json!({})))
}

pub(crate) async fn finish_roots(pending: Outstanding) -> Result<Vec<String>, AskError> {
    let result = pending.reply().await?;
    let malformed = |detail: &str| AskError::Malformed {
        method: "roots/list",
        detail: detail.to_owned(),
    };
    let roots = result
        .get("roots")
        .and_then(Value::as_array)
        .ok_or_else(|| malformed("missing `roots` array"))?;
    roots
        .iter()
        .map(|root| {
            root.get("uri")
                .and_then(Value::as_str)
                .map(str::to_owned)
                .ok_or_else(|| malformed("a root has no `uri` string"))
        })
        .collect()
}

pub(crate) async fn list_roots(ctx: &Ctx) -> Result<Vec<String>, AskError> {
    finish_roots(start_roots(ctx)?).await
}
