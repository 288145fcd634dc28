"""A 2026-07-28 MCP server built with `MCPServer` from the Python SDK 2.3.0, in the modern style.

Its tools never push a request to the client in the middle of a call. When they need input
they answer `InputRequiredResult`: the questions (`inputRequests`) and a `requestState` of their
own. The client answers the questions and sends the call again with `inputResponses` and that
state, verbatim. It is the kind of server the gateway must relay to once a backend is upgraded.

Each tool's state is a JSON object naming this server, the tool and the round it answers
(plus, for `two_rounds`, the first round's answer). On a retry the tool refuses, with a
JSON-RPC error, a call that brings responses without a state, a state it cannot read, one
minted for another tool or round, and responses that are not the ones it asked for. The SDK
also seals every outgoing state (AES-GCM under a key held by this process, bound to the
method, tool and arguments) and refuses a state it did not seal with -32602 "Invalid or
expired requestState". So an intermediary that does not hand back exactly the state this
server minted makes the call fail.

Tools:
    echo(text)                  returns `text`
    ask_name(message)           form elicitation; 'accepted:NAME', 'declined' or 'cancelled'
    ask_sample(prompt)          sampling; the sampled text
    ask_roots()                 roots/list; the root URIs joined by ','
    two_rounds(message, prompt) elicitation, then on the retry a second InputRequiredResult
                                with a sampling request; 'NAME|SAMPLED' (the name carried in
                                the state between rounds)
    progress(steps)             `steps` progress and log notifications, then 'done:STEPS'
    fail(code, message)         answers the JSON-RPC error `code` with `message` (and data naming
                                this server), for a relay to carry through with its HTTP status
    slow(key, seconds)          one progress notification, then waits `seconds`; records under
                                `key` whether it completed or was cancelled (the client closed
                                the stream, or sent notifications/cancelled over stdio)
    outcome(key)                'running', 'completed', 'cancelled' or 'unknown' for that key
                                (kept per process)
    changed(uri)                tells `subscriptions/listen` streams that the tool list changed
                                and that the resource `uri` was updated
    seen(region)                what reached the server with this call, as JSON: the request's
                                `_meta` and its `Mcp-*` and `Authorization` headers (none over
                                stdio); `region` is declared `x-mcp-header: Region`, so the SDK
                                refuses the call (400, -32020) unless `Mcp-Param-Region`
                                carries its value
Prompt `greeting` (elicits a name) and resource template `interop://profile/{who}` (elicits a
name) answer InputRequiredResult the same way on `prompts/get` and `resources/read`.

Usage:
    modern_server.py stdio [--state-key SECRET] [--cancel-log FILE]
    modern_server.py http [--host 127.0.0.1] [--port 0] [--path /mcp] [--state-key SECRET]
                     [--cancel-log FILE] [--stateful]

The SDK seals states under a key each process makes at start, so by default a retry that reaches
another process (another stdio child, another replica) is refused; processes given the same
`--state-key` (32 bytes or more) accept each other's states.

`--cancel-log FILE` appends to FILE, one line each, what a test needs to see a cancellation
arrive: `started KEY ID` when `slow` starts as the request ID, `notified ID` when a
`notifications/cancelled` for the request ID arrives (only over stdio can one), and
`cancelled KEY` when `slow` stops early. Several processes may share the file.

`--stateful` serves legacy clients with sessions, as the SDK does by default: a request naming a
session this process did not start is answered 404. 2026-07-28 requests are served without one
either way.

Over HTTP it serves stateless Streamable HTTP on a socket bound here (port 0: any free port)
and, once uvicorn serves, prints one line on stdout, `listening on URL`.
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
import warnings
from collections.abc import Mapping
from typing import Annotated, Any

import anyio
import uvicorn
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.request_state import RequestStateSecurity
from mcp.shared.exceptions import MCPDeprecationWarning, MCPError
from mcp_types import (
    INVALID_PARAMS,
    CancelledNotificationParams,
    CreateMessageRequest,
    CreateMessageRequestParams,
    CreateMessageResult,
    ElicitRequest,
    ElicitRequestFormParams,
    ElicitResult,
    InputRequiredResult,
    ListRootsRequest,
    ListRootsResult,
    SamplingMessage,
    TextContent,
)
from pydantic import Field

# 2026-07-28 deprecates log notifications, but servers still send them and a relay must carry
# them; the SDK's warning on each one would only clutter the test output.
warnings.filterwarnings("ignore", category=MCPDeprecationWarning)

SERVER = "interop-modern"
# The sampling requests ask for this many tokens; a relay must carry it through unchanged.
MAX_TOKENS = 50
NAME_SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}


def refuse(reason: str) -> MCPError:
    """The error a retry gets when its state or responses are not what this server asked."""
    return MCPError(code=INVALID_PARAMS, message=f"{SERVER}: {reason}", data={"reason": reason})


def mint(target: str, round_: int, **carried: Any) -> str:
    """This server's own state for the round `round_` of `target` (a tool, prompt or resource)."""
    return json.dumps({"server": SERVER, "target": target, "round": round_, **carried}, sort_keys=True)


def opened(ctx: Context, target: str) -> dict[str, Any] | None:
    """The state a retry brought back, checked against `target`; None on a first call.

    A call that brings responses but no state is refused: the server cannot tell which
    question they answer, and an intermediary that dropped the state must not go unnoticed."""
    state, responses = ctx.request_state, ctx.input_responses
    if state is None:
        if responses:
            raise refuse("inputResponses without requestState")
        return None
    try:
        claims = json.loads(state)
    except ValueError:
        raise refuse("requestState is not this server's") from None
    if not isinstance(claims, dict) or claims.get("server") != SERVER or claims.get("target") != target:
        raise refuse("requestState was minted for another call")
    if not isinstance(claims.get("round"), int):
        raise refuse("requestState has no round")
    return claims


def response(ctx: Context, key: str, kind: type) -> Any:
    """The client's answer to the input request `key`, which must be of `kind`."""
    responses = ctx.input_responses or {}
    if set(responses) != {key}:
        raise refuse(f"expected exactly the response {key!r}, got {sorted(responses)}")
    answer = responses[key]
    if not isinstance(answer, kind):
        raise refuse(f"response {key!r} is not a {kind.__name__}")
    return answer


def elicit_name(message: str) -> ElicitRequest:
    return ElicitRequest(params=ElicitRequestFormParams(message=message, requested_schema=NAME_SCHEMA))


def sample(prompt: str) -> CreateMessageRequest:
    return CreateMessageRequest(
        params=CreateMessageRequestParams(
            messages=[SamplingMessage(role="user", content=TextContent(type="text", text=prompt))],
            max_tokens=MAX_TOKENS,
        )
    )


def name_outcome(answer: ElicitResult) -> str:
    if answer.action == "accept":
        return f"accepted:{(answer.content or {}).get('name')}"
    return "declined" if answer.action == "decline" else "cancelled"


def sampled_text(answer: CreateMessageResult) -> str:
    content = answer.content
    if isinstance(content, TextContent):
        return content.text
    # The client answered with something other than one text block; show it rather than guess.
    return f"non-text:{content!r}"


def ask(target: str, key: str, request: Any, round_: int = 1, **carried: Any) -> InputRequiredResult:
    return InputRequiredResult(input_requests={key: request}, request_state=mint(target, round_, **carried))


def expect_round(claims: Mapping[str, Any], round_: int) -> None:
    if claims["round"] != round_:
        raise refuse(f"requestState is for round {claims['round']}, not {round_}")


# What became of each `slow` call, by its key: shows whether a cancellation reached the server.
OUTCOMES: dict[str, str] = {}
# The `--cancel-log` file, if any.
CANCEL_LOG: str | None = None


def log_cancel(line: str) -> None:
    """Appends `line` to the `--cancel-log` file; one write per line, so processes sharing the
    file never interleave within a line."""
    if CANCEL_LOG is not None:
        with open(CANCEL_LOG, "a", encoding="utf-8") as log:
            log.write(f"{line}\n")


async def on_cancelled(ctx: Any, params: CancelledNotificationParams) -> None:
    """Records a `notifications/cancelled`; the SDK itself has already cancelled the request."""
    log_cancel(f"notified {params.request_id}")


async def echo(text: str) -> str:
    """Returns its `text` argument."""
    return text


async def ask_name(ctx: Context, message: str = "What is your name?") -> str | InputRequiredResult:
    """Asks the user for their name (form elicitation inside InputRequiredResult)."""
    claims = opened(ctx, "ask_name")
    if claims is None:
        return ask("ask_name", "name", elicit_name(message))
    expect_round(claims, 1)
    return name_outcome(response(ctx, "name", ElicitResult))


async def ask_sample(ctx: Context, prompt: str = "Say hello") -> str | InputRequiredResult:
    """Asks the client's LLM to answer `prompt` (sampling); returns the sampled text."""
    claims = opened(ctx, "ask_sample")
    if claims is None:
        return ask("ask_sample", "llm", sample(prompt))
    expect_round(claims, 1)
    return sampled_text(response(ctx, "llm", CreateMessageResult))


async def ask_roots(ctx: Context) -> str | InputRequiredResult:
    """Asks for the client's roots; returns their URIs joined by ','."""
    claims = opened(ctx, "ask_roots")
    if claims is None:
        return ask("ask_roots", "roots", ListRootsRequest())
    expect_round(claims, 1)
    roots = response(ctx, "roots", ListRootsResult).roots
    return ",".join(str(root.uri) for root in roots)


async def two_rounds(
    ctx: Context, message: str = "What is your name?", prompt: str = "Say hello"
) -> str | InputRequiredResult:
    """Elicits a name, then (a second InputRequiredResult) samples; returns 'NAME|SAMPLED'.
    The name rides the state from the first retry to the second."""
    claims = opened(ctx, "two_rounds")
    if claims is None:
        return ask("two_rounds", "name", elicit_name(message))
    if claims["round"] == 1:
        name = name_outcome(response(ctx, "name", ElicitResult))
        return ask("two_rounds", "llm", sample(prompt), round_=2, name=name)
    expect_round(claims, 2)
    name = claims.get("name")
    if not isinstance(name, str):
        raise refuse("requestState lost the first round's answer")
    return f"{name}|{sampled_text(response(ctx, 'llm', CreateMessageResult))}"


async def progress(ctx: Context, steps: int = 3) -> str:
    """Sends `steps` progress notifications and as many log messages, then answers."""
    for step in range(1, steps + 1):
        await ctx.report_progress(step, steps, f"step {step} of {steps}")
        await ctx.info(f"progress step {step}")
    return f"done:{steps}"


async def fail(code: int, message: str = "failed on purpose") -> str:
    """Answers the JSON-RPC error `code` with `message`."""
    raise MCPError(code=code, message=message, data={"server": SERVER})


async def slow(ctx: Context, key: str, seconds: float = 30.0) -> str:
    """Sends one progress notification, then waits `seconds`; records under `key` whether
    the call completed or was cancelled."""
    OUTCOMES[key] = "running"
    log_cancel(f"started {key} {ctx.request_id}")
    try:
        # The notification commits an HTTP answer to SSE at once, so the client has a
        # stream to close.
        await ctx.report_progress(0, seconds, f"waiting {seconds}s")
        await anyio.sleep(seconds)
    except anyio.get_cancelled_exc_class():
        OUTCOMES[key] = "cancelled"
        log_cancel(f"cancelled {key}")
        raise
    OUTCOMES[key] = "completed"
    return f"completed:{key}"


async def outcome(key: str) -> str:
    """What became of the `slow` call with this key."""
    return OUTCOMES.get(key, "unknown")


async def changed(ctx: Context, uri: str) -> str:
    """Tells every `subscriptions/listen` stream that the tool list changed and that the
    resource `uri` was updated."""
    await ctx.notify_tools_changed()
    await ctx.notify_resource_updated(uri)
    return f"changed:{uri}"


async def seen(
    ctx: Context, region: Annotated[str, Field(json_schema_extra={"x-mcp-header": "Region"})] = "none"
) -> str:
    """What reached the server with this call: its `_meta`, and its `Mcp-*` and
    `Authorization` headers. `region` travels in the `Mcp-Param-Region` header too."""
    params = ctx.request_context.params or {}
    headers = ctx.headers or {}
    lowered = {k.lower(): v for k, v in headers.items()}
    relayed = {k: v for k, v in lowered.items() if k.startswith("mcp-") or k == "authorization"}
    return json.dumps({"region": region, "meta": params.get("_meta"), "headers": relayed}, sort_keys=True)


async def greeting(ctx: Context, message: str = "Who is greeted?") -> str | InputRequiredResult:
    """Elicits a name, then renders a greeting for it."""
    claims = opened(ctx, "greeting")
    if claims is None:
        return ask("greeting", "name", elicit_name(message))
    expect_round(claims, 1)
    return f"Hello, {name_outcome(response(ctx, 'name', ElicitResult))}!"


async def profile(who: str, ctx: Context) -> str | InputRequiredResult:
    """Elicits a name for `who`, then reads as 'profile:WHO:NAME'."""
    target = f"interop://profile/{who}"
    claims = opened(ctx, target)
    if claims is None:
        return ask(target, "name", elicit_name(f"Profile name for {who}?"))
    expect_round(claims, 1)
    return f"profile:{who}:{name_outcome(response(ctx, 'name', ElicitResult))}"


TOOLS = [echo, ask_name, ask_sample, ask_roots, two_rounds, progress, fail, slow, outcome, changed, seen]


def build_server(state_key: str | None) -> MCPServer:
    security = None if state_key is None else RequestStateSecurity(keys=[state_key])
    mcp = MCPServer(SERVER, version="2.3.0-interop", log_level="WARNING", request_state_security=security)
    for tool in TOOLS:
        mcp.tool()(tool)
    mcp.prompt()(greeting)
    mcp.resource("interop://profile/{who}", mime_type="text/plain")(profile)
    # The SDK applies a cancellation itself and then passes it to a handler, if one is set.
    mcp._lowlevel_server.add_notification_handler(
        "notifications/cancelled", CancelledNotificationParams, on_cancelled
    )
    return mcp


async def serve_http(mcp: MCPServer, host: str, port: int, path: str, stateful: bool) -> None:
    """Serve the Streamable HTTP app (stateless unless `stateful`) on a socket bound here, so
    port 0 works and the real port can be announced once requests are served."""
    app = mcp.streamable_http_app(streamable_http_path=path, stateless_http=not stateful, host=host)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    bound = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    stopped = anyio.Event()

    async def serve() -> None:
        try:
            await server.serve([sock])
        finally:
            stopped.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(serve)
        # `started` turns true once the app's lifespan ran and the socket listens.
        while not server.started:
            if stopped.is_set():
                raise SystemExit("uvicorn stopped before it started")
            await anyio.sleep(0.01)
        print(f"listening on http://{host}:{bound}{path}", flush=True)


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("transport", choices=["stdio", "http"])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0: any free port (announced on stdout)")
    parser.add_argument("--path", default="/mcp", help="Streamable HTTP endpoint path")
    parser.add_argument("--state-key", help="seal states under this secret (shared by processes given it)")
    parser.add_argument("--stateful", action="store_true", help="legacy clients get sessions (the SDK's default)")
    parser.add_argument("--cancel-log", help="append what shows a cancellation arriving to this file")
    args = parser.parse_args(argv)

    global CANCEL_LOG
    CANCEL_LOG = args.cancel_log

    mcp = build_server(args.state_key)
    if args.transport == "stdio":
        mcp.run("stdio")
    else:
        anyio.run(serve_http, mcp, args.host, args.port, args.path, args.stateful)


if __name__ == "__main__":
    main(sys.argv[1:])
