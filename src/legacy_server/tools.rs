//! The tools this server offers. Every successful result is a single text block holding a
//! JSON document, so tests can parse exactly what the tool observed.

use std::time::Duration;

use serde_json::{Map, Value, json};

use super::asks::{self, AskError};
use super::session::Ctx;
use super::wire::{RpcError, URL_ELICITATION_REQUIRED};

const MAX_SLEEP_MS: u64 = 60_000;
const MAX_PROGRESS_STEPS: u64 = 1_000;
const DEFAULT_FORM_MESSAGE: &str = "What is your name?";
const DEFAULT_PROMPT: &str = "Say hello in five words or fewer.";

/// How a tool can fail.
#[derive(Debug)]
enum ToolError {
    /// Reported in-band as a result with `isError: true`.
    Failed(String),
    /// Reported as a JSON-RPC error response.
    Protocol(RpcError),
}

impl From<AskError> for ToolError {
    fn from(err: AskError) -> Self {
        Self::Failed(err.to_string())
    }
}

type ToolResult = Result<Value, ToolError>;

struct ToolDef {
    name: &'static str,
    description: &'static str,
    properties: fn() -> Value,
    required: &'static [&'static str],
    read_only: bool,
    destructive: bool,
    /// Running it twice with the same input has no further effect (`idempotentHint`).
    idempotent: bool,
}

fn no_properties() -> Value {
    json!({})
}

const TOOLS: &[ToolDef] = &[
    ToolDef {
        name: "echo",
        description: "Returns its text argument unchanged.",
        properties: || json!({"text": {"type": "string", "description": "Text to echo"}}),
        required: &["text"],
        read_only: true,
        destructive: false,
        idempotent: false,
    },
    ToolDef {
        name: "ask_form",
        description: "Asks the user for their name through a form elicitation.",
        properties: || {
            json!({
                "message": {"type": "string", "description": "Question to show"},
                "then_ms": {"type": "integer", "minimum": 0, "maximum": MAX_SLEEP_MS,
                            "description": "How long to work after the answer before finishing"},
            })
        },
        required: &[],
        read_only: true,
        destructive: false,
        idempotent: false,
    },
    ToolDef {
        name: "ask_url",
        description: "Sends the user to an authorization URL (URL-mode elicitation).",
        properties: no_properties,
        required: &[],
        read_only: true,
        destructive: false,
        idempotent: false,
    },
    ToolDef {
        name: "sample",
        description: "Asks the client's model to complete a prompt.",
        properties: || {
            json!({
                "prompt": {"type": "string", "description": "Prompt to sample"},
                "tools": {"type": "boolean", "description": "Offer the model a tool (needs `sampling.tools`)"},
            })
        },
        required: &[],
        read_only: true,
        destructive: false,
        idempotent: false,
    },
    ToolDef {
        name: "list_roots",
        description: "Lists the client's roots.",
        properties: no_properties,
        required: &[],
        read_only: true,
        destructive: false,
        idempotent: false,
    },
    ToolDef {
        name: "all_three",
        description: "Elicits, then samples, then lists roots, one after another.",
        properties: no_properties,
        required: &[],
        read_only: true,
        destructive: false,
        idempotent: false,
    },
    ToolDef {
        name: "pair",
        description: "Elicits and samples at the same time.",
        properties: no_properties,
        required: &[],
        read_only: true,
        destructive: false,
        idempotent: false,
    },
    ToolDef {
        name: "url_required",
        description: "Fails with a URL-elicitation-required error until the account is connected.",
        properties: || {
            json!({"ask_first_ms": {
                "type": "integer",
                "description": "First ask for a name, and fail this many milliseconds later without waiting for the answer",
            }})
        },
        required: &[],
        read_only: true,
        destructive: false,
        idempotent: false,
    },
    ToolDef {
        name: "fail",
        description: "Answers with a JSON-RPC error of the given code.",
        properties: || {
            json!({
                "code": {"type": "integer", "description": "The error code"},
                "message": {"type": "string", "description": "The error message"},
            })
        },
        required: &["code"],
        read_only: true,
        destructive: false,
        idempotent: true,
    },
    ToolDef {
        name: "slow",
        description: "Sleeps for the given number of milliseconds (at most 60000).",
        properties: || {
            json!({"ms": {"type": "integer", "minimum": 0, "maximum": MAX_SLEEP_MS,
                          "description": "How long to sleep"}})
        },
        required: &["ms"],
        read_only: true,
        destructive: false,
        idempotent: false,
    },
    ToolDef {
        name: "crash",
        description: "Terminates the server process with exit status 3.",
        properties: no_properties,
        required: &[],
        read_only: false,
        destructive: true,
        idempotent: false,
    },
    ToolDef {
        name: "session_info",
        description: "Reports what the client declared in initialize.",
        properties: no_properties,
        required: &[],
        read_only: true,
        destructive: false,
        idempotent: false,
    },
    ToolDef {
        name: "progress",
        description: "Sends the given number of progress notifications, 10 ms apart.",
        properties: || {
            json!({"steps": {"type": "integer", "minimum": 0, "maximum": MAX_PROGRESS_STEPS,
                             "description": "How many notifications to send"}})
        },
        required: &["steps"],
        read_only: true,
        destructive: false,
        idempotent: false,
    },
    ToolDef {
        name: "two_step",
        description: "Asks for a name, then asks to confirm it: two elicitations in sequence, the second quoting the first answer.",
        properties: || json!({"tag": {"type": "string", "description": "Quoted in both questions"}}),
        required: &[],
        read_only: false,
        destructive: false,
        idempotent: true,
    },
    ToolDef {
        name: "log_levels",
        description: "Sends one log message (notifications/message) at each of the eight levels, debug first.",
        properties: no_properties,
        required: &[],
        read_only: true,
        destructive: false,
        idempotent: true,
    },
];

/// The `tools/list` result.
pub(crate) fn list(ctx: &Ctx) -> Value {
    // Tool annotations only exist from 2025-03-26 on.
    let annotate = ctx.at_least("2025-03-26");
    let tools: Vec<Value> = TOOLS
        .iter()
        .map(|def| {
            let mut tool = json!({
                "name": def.name,
                "description": def.description,
                "inputSchema": {
                    "type": "object",
                    "properties": (def.properties)(),
                    "required": def.required,
                },
            });
            if annotate {
                tool["annotations"] = json!({
                    "readOnlyHint": def.read_only,
                    "destructiveHint": def.destructive,
                    "idempotentHint": def.idempotent,
                    "openWorldHint": false,
                });
            }
            tool
        })
        .collect();
    json!({"tools": tools})
}

/// Handles `tools/call`.
pub(crate) async fn call(ctx: &Ctx, params: &Value) -> Result<Value, RpcError> {
    let name = params
        .get("name")
        .and_then(Value::as_str)
        .ok_or_else(|| RpcError::invalid_params("tools/call needs a `name` string"))?;
    let empty = Map::new();
    let args = match params.get("arguments") {
        None | Some(Value::Null) => &empty,
        Some(Value::Object(args)) => args,
        Some(_) => return Err(RpcError::invalid_params("`arguments` must be an object")),
    };
    let outcome = match name {
        "echo" => echo(args),
        "ask_form" => ask_form(ctx, args).await,
        "ask_url" => ask_url(ctx).await,
        "sample" => sample(ctx, args).await,
        "list_roots" => list_roots(ctx).await,
        "all_three" => all_three(ctx).await,
        "pair" => pair(ctx).await,
        "two_step" => two_step(ctx, args).await,
        "log_levels" => log_levels(ctx),
        "url_required" => url_required(ctx, args).await,
        "fail" => fail(args),
        "slow" => slow(ctx, args).await,
        "crash" => crash(ctx).await,
        "session_info" => Ok(session_info(ctx)),
        "progress" => progress(ctx, args).await,
        other => return Err(RpcError::invalid_params(format!("Unknown tool: {other}"))),
    };
    match outcome {
        Ok(value) => Ok(json!({"content": [text_block(&value.to_string())]})),
        Err(ToolError::Failed(text)) => {
            Ok(json!({"content": [text_block(&text)], "isError": true}))
        }
        Err(ToolError::Protocol(err)) => Err(err),
    }
}

fn text_block(text: &str) -> Value {
    json!({"type": "text", "text": text})
}

fn optional_str<'a>(args: &'a Map<String, Value>, key: &str) -> Result<Option<&'a str>, ToolError> {
    match args.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(ToolError::Failed(format!(
            "argument `{key}` must be a string"
        ))),
    }
}

fn required_u64(args: &Map<String, Value>, key: &str) -> Result<u64, ToolError> {
    optional_u64(args, key)?.ok_or_else(|| {
        ToolError::Failed(format!("argument `{key}` must be a non-negative integer"))
    })
}

fn optional_u64(args: &Map<String, Value>, key: &str) -> Result<Option<u64>, ToolError> {
    match args.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v.as_u64().map(Some).ok_or_else(|| {
            ToolError::Failed(format!("argument `{key}` must be a non-negative integer"))
        }),
    }
}

fn echo(args: &Map<String, Value>) -> ToolResult {
    let text = optional_str(args, "text")?
        .ok_or_else(|| ToolError::Failed("argument `text` is required".to_owned()))?;
    Ok(json!({"echo": text}))
}

fn name_form() -> Value {
    asks::single_string_schema("name", "Your name")
}

async fn ask_form(ctx: &Ctx, args: &Map<String, Value>) -> ToolResult {
    let message = optional_str(args, "message")?.unwrap_or(DEFAULT_FORM_MESSAGE);
    let then_ms = optional_u64(args, "then_ms")?
        .unwrap_or(0)
        .min(MAX_SLEEP_MS);
    let outcome = asks::ask_form(ctx, message, name_form()).await?;
    if then_ms > 0 {
        tokio::time::sleep(Duration::from_millis(then_ms)).await;
    }
    Ok(outcome.to_json())
}

async fn ask_url(ctx: &Ctx) -> ToolResult {
    asks::require_url(ctx)?;
    let (n, elicitation_id) = ctx.shared.next_elicitation();
    let url = format!("https://example.com/authorize?session={n}");
    let pending = asks::start_url(ctx, "Authorize the demo server", &elicitation_id, &url)?;
    let outcome = asks::finish_elicit(pending).await?;
    Ok(json!({"action": outcome.action, "elicitationId": elicitation_id}))
}

async fn sample(ctx: &Ctx, args: &Map<String, Value>) -> ToolResult {
    let prompt = optional_str(args, "prompt")?.unwrap_or(DEFAULT_PROMPT);
    let with_tools = match args.get("tools") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => {
            return Err(ToolError::Failed(
                "argument `tools` must be a boolean".into(),
            ));
        }
    };
    let outcome = asks::finish_sample(asks::start_sample(ctx, prompt, with_tools)?).await?;
    Ok(outcome.to_json())
}

async fn list_roots(ctx: &Ctx) -> ToolResult {
    let roots = asks::list_roots(ctx).await?;
    let cached = ctx.shared.session().cached_roots.clone();
    Ok(json!({"roots": roots, "cachedRoots": cached}))
}

async fn all_three(ctx: &Ctx) -> ToolResult {
    // Check every gate first so an unusable client gets no partial conversation.
    asks::require_form(ctx)?;
    asks::require_sampling(ctx)?;
    asks::require_roots(ctx)?;
    let elicit = asks::ask_form(ctx, DEFAULT_FORM_MESSAGE, name_form()).await?;
    let sample = asks::finish_sample(asks::start_sample(ctx, DEFAULT_PROMPT, false)?).await?;
    let roots = asks::list_roots(ctx).await?;
    Ok(json!({"elicit": elicit.to_json(), "sample": sample.to_json(), "roots": roots}))
}

async fn pair(ctx: &Ctx) -> ToolResult {
    asks::require_form(ctx)?;
    asks::require_sampling(ctx)?;
    // Both requests are on the wire before either answer is awaited.
    let elicit = asks::start_form(ctx, DEFAULT_FORM_MESSAGE, name_form())?;
    let sample = asks::start_sample(ctx, DEFAULT_PROMPT, false)?;
    let (elicit, sample) = tokio::join!(asks::finish_elicit(elicit), asks::finish_sample(sample));
    Ok(json!({"elicit": elicit?.to_json(), "sample": sample?.to_json()}))
}

/// Two rounds: the second question depends on the first answer, so a replayed call that got
/// a different first answer would be asked a different second question.
fn log_levels(ctx: &Ctx) -> ToolResult {
    use crate::protocol::meta::LOG_LEVELS;
    for level in LOG_LEVELS {
        ctx.log(level, &format!("a message at {level}"));
    }
    Ok(json!({"sent": LOG_LEVELS.len()}))
}

async fn two_step(ctx: &Ctx, args: &Map<String, Value>) -> ToolResult {
    let tag = optional_str(args, "tag")?.unwrap_or("");
    let first = asks::ask_form(ctx, &format!("Name for {tag}?"), name_form()).await?;
    let name = first.accepted_str("name").unwrap_or("").to_owned();
    let schema = asks::single_string_schema("answer", "yes or no");
    let second = asks::ask_form(ctx, &format!("Confirm {name} for {tag}?"), schema).await?;
    Ok(json!({"tag": tag, "name": name, "confirm": second.accepted_str("answer")}))
}

async fn url_required(ctx: &Ctx, args: &Map<String, Value>) -> ToolResult {
    if !ctx.at_least("2025-11-25") {
        return Err(ToolError::Failed(format!(
            "url_required needs protocol 2025-11-25 or later, but this session negotiated {}",
            ctx.version()
        )));
    }
    let first_call = !std::mem::replace(&mut ctx.shared.session().url_connected, true);
    if !first_call {
        return Ok(json!({"connected": true}));
    }
    // A question left unanswered: the call ends while its client may be away answering it.
    let _unanswered = match optional_u64(args, "ask_first_ms")? {
        Some(ms) => {
            let ask = asks::start_form(ctx, DEFAULT_FORM_MESSAGE, name_form())?;
            tokio::time::sleep(Duration::from_millis(ms.min(MAX_SLEEP_MS))).await;
            Some(ask)
        }
        None => None,
    };
    let (_, elicitation_id) = ctx.shared.next_elicitation();
    let data = json!({"elicitations": [{
        "mode": "url",
        "elicitationId": elicitation_id,
        "url": "https://example.com/connect",
        "message": "Connect your account",
    }]});
    Err(ToolError::Protocol(
        RpcError::new(
            URL_ELICITATION_REQUIRED,
            "This request requires connecting your account first.",
        )
        .with_data(data),
    ))
}

fn fail(args: &Map<String, Value>) -> ToolResult {
    let code = args
        .get("code")
        .and_then(Value::as_i64)
        .ok_or_else(|| ToolError::Failed("argument `code` must be an integer".into()))?;
    let message = optional_str(args, "message")?.unwrap_or("failed as asked");
    Err(ToolError::Protocol(
        RpcError::new(code, message).with_data(json!({"asked": code})),
    ))
}

async fn slow(ctx: &Ctx, args: &Map<String, Value>) -> ToolResult {
    let ms = required_u64(args, "ms")?.min(MAX_SLEEP_MS);
    ctx.announce_start();
    tokio::time::sleep(Duration::from_millis(ms)).await;
    Ok(json!({"slept": ms}))
}

async fn crash(ctx: &Ctx) -> ToolResult {
    ctx.shared.crash.notify_one();
    // The session is torn down from the reader loop; this call never answers.
    std::future::pending().await
}

fn session_info(ctx: &Ctx) -> Value {
    let session = ctx.shared.session();
    json!({
        "protocolVersion": session.protocol_version,
        "clientCapabilities": session.client_capabilities,
        "clientInfo": session.client_info,
        "pid": std::process::id(),
    })
}

async fn progress(ctx: &Ctx, args: &Map<String, Value>) -> ToolResult {
    let steps = required_u64(args, "steps")?;
    if steps > MAX_PROGRESS_STEPS {
        return Err(ToolError::Failed(format!(
            "argument `steps` must be at most {MAX_PROGRESS_STEPS}"
        )));
    }
    for step in 1..=steps {
        if step > 1 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        if ctx.has_progress_token() {
            ctx.progress(step, steps, &format!("step {step} of {steps}"));
        }
    }
    Ok(json!({"steps": steps}))
}
