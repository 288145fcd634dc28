"""A legacy MCP server built with FastMCP from the Python SDK 1.30.0, unmodified.

Its tools push server-to-client requests in the middle of a call, the way 2024-11-05 ..
2025-11-25 servers do: form elicitation, sampling and roots/list. The interop tests put the
gateway in front of it and expect a 2026-07-28 client to see exactly what its own callbacks
answered.

Usage:
    legacy_stdio_server.py stdio
    legacy_stdio_server.py streamable-http [--host 127.0.0.1] [--port 0] [--path /mcp]
                           [--event-store] [--request-log FILE]
    legacy_stdio_server.py sse [--host 127.0.0.1] [--port 0]

Over HTTP the server binds its socket itself (port 0: any free port) and, once uvicorn has
started, prints one line on stdout, `listening on URL`, with the URL a client connects to
(`.../mcp` for Streamable HTTP, `.../sse` for HTTP+SSE). A test learns the port from that line,
so no port is ever guessed.

The tools call the SDK the way its own documentation shows, nothing more: `ctx.elicit` ties
the elicitation to the tool call, while `create_message` and `list_roots` are sent without a
related request id. Over Streamable HTTP those two therefore travel on the standalone GET
stream, which is what real FastMCP servers do and what a gateway has to cope with.

`--event-store` gives FastMCP an event store (the SDK's `EventStore` interface, kept in memory
here), so it numbers the events of its Streamable HTTP streams and replays them to a `GET` with
`Last-Event-ID`. `--request-log FILE` appends one line per HTTP request to FILE: its method and
its `Last-Event-ID` header (`-` when absent).
"""

from __future__ import annotations

import argparse
import socket
import sys

import anyio
import uvicorn

from mcp.server.elicitation import AcceptedElicitation, DeclinedElicitation
from mcp.server.fastmcp import Context, FastMCP
from mcp.server.streamable_http import EventCallback, EventId, EventMessage, EventStore, StreamId
from mcp.types import JSONRPCMessage, SamplingMessage, TextContent
from pydantic import BaseModel


class Name(BaseModel):
    """The form the `ask_name` elicitation asks the user to fill in."""

    name: str


async def _ask_name(ctx: Context, message: str) -> str:
    outcome = await ctx.elicit(message, schema=Name)
    if isinstance(outcome, AcceptedElicitation):
        return f"accepted:{outcome.data.name}"
    if isinstance(outcome, DeclinedElicitation):
        return "declined"
    return "cancelled"


async def _ask_llm(ctx: Context, prompt: str) -> str:
    result = await ctx.session.create_message(
        messages=[SamplingMessage(role="user", content=TextContent(type="text", text=prompt))],
        max_tokens=50,
    )
    content = result.content
    if isinstance(content, TextContent):
        return content.text
    # The client answered with something other than one text block; show it rather than guess.
    return f"non-text:{content!r}"


async def _roots(ctx: Context) -> str:
    result = await ctx.session.list_roots()
    return ",".join(str(root.uri) for root in result.roots)


class MemoryEventStore(EventStore):
    """Every event of every stream, numbered in the order stored."""

    def __init__(self) -> None:
        self._events: list[tuple[StreamId, JSONRPCMessage | None]] = []

    async def store_event(self, stream_id: StreamId, message: JSONRPCMessage | None) -> EventId:
        self._events.append((stream_id, message))
        return str(len(self._events))

    async def replay_events_after(self, last_event_id: EventId, send_callback: EventCallback) -> StreamId | None:
        if not last_event_id.isdigit() or not 0 < int(last_event_id) <= len(self._events):
            return None
        stream_id = self._events[int(last_event_id) - 1][0]
        for number in range(int(last_event_id) + 1, len(self._events) + 1):
            stream, message = self._events[number - 1]
            if stream == stream_id and message is not None:
                await send_callback(EventMessage(message, str(number)))
        return stream_id


def logged(app, path: str):
    """`app`, appending each HTTP request's method and `Last-Event-ID` to the file at `path`."""

    async def wrapper(scope, receive, send):
        if scope["type"] == "http":
            headers = dict(scope["headers"])
            last = headers.get(b"last-event-id", b"-").decode()
            with open(path, "a", encoding="utf-8") as log:
                log.write(f"{scope['method']} {last}\n")
        await app(scope, receive, send)

    return wrapper


def build_server(host: str, port: int, path: str, event_store: EventStore | None = None) -> FastMCP:
    """The server with its five tools. Host and port go to the constructor, because FastMCP
    derives its DNS-rebinding allow-list from the host it was built with."""
    mcp = FastMCP(
        "interop-legacy",
        host=host,
        port=port,
        streamable_http_path=path,
        log_level="WARNING",
        event_store=event_store,
    )

    @mcp.tool()
    async def ask_name(ctx: Context, message: str = "What is your name?") -> str:
        """Ask the user for their name (form elicitation)."""
        return await _ask_name(ctx, message)

    @mcp.tool()
    async def ask_llm(ctx: Context, prompt: str = "Say hello") -> str:
        """Ask the client's LLM to answer a prompt (sampling); returns the sampled text."""
        return await _ask_llm(ctx, prompt)

    @mcp.tool()
    async def roots(ctx: Context) -> str:
        """List the client's roots; returns their URIs joined by ','."""
        return await _roots(ctx)

    @mcp.tool()
    async def whoami(ctx: Context) -> str:
        """The Authorization header of the HTTP request that carried this call, or '<none>'
        (always '<none>' over stdio): shows what credential the backend was given."""
        request = ctx.request_context.request
        header = request.headers.get("authorization") if request is not None else None
        return header if header is not None else "<none>"

    @mcp.tool()
    async def everything(ctx: Context, message: str = "What is your name?", prompt: str = "Say hello") -> str:
        """Elicit, sample and list roots in sequence within one call; returns 'name|sampled|roots'."""
        name = await _ask_name(ctx, message)
        sampled = await _ask_llm(ctx, prompt)
        root_uris = await _roots(ctx)
        return f"{name}|{sampled}|{root_uris}"

    return mcp


async def serve_http(mcp: FastMCP, transport: str, host: str, port: int, request_log: str | None) -> None:
    """Serve the FastMCP app the way `FastMCP.run` does (uvicorn, same app), but on a socket
    bound here, so port 0 works and the real port can be announced once requests are served."""
    if transport == "streamable-http":
        app, path = mcp.streamable_http_app(), mcp.settings.streamable_http_path
    else:
        app, path = mcp.sse_app(), mcp.settings.sse_path
    if request_log is not None:
        app = logged(app, request_log)
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
    parser.add_argument("transport", choices=["stdio", "streamable-http", "sse"])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0: any free port (announced on stdout)")
    parser.add_argument("--path", default="/mcp", help="Streamable HTTP endpoint path")
    parser.add_argument("--event-store", action="store_true", help="number events, replay them on resumption")
    parser.add_argument("--request-log", help="append each HTTP request's method and Last-Event-ID here")
    args = parser.parse_args(argv)

    mcp = build_server(args.host, args.port, args.path, MemoryEventStore() if args.event_store else None)
    if args.transport == "stdio":
        mcp.run("stdio")
    else:
        anyio.run(serve_http, mcp, args.transport, args.host, args.port, args.request_log)


if __name__ == "__main__":
    main(sys.argv[1:])
