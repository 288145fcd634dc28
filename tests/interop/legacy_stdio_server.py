"""A legacy MCP server built with FastMCP from the Python SDK 1.30.0, unmodified.

Its tools push server-to-client requests in the middle of a call, the way 2024-11-05 ..
2025-11-25 servers do: form elicitation, sampling and roots/list. The interop tests put the
gateway in front of it and expect a 2026-07-28 client to see exactly what its own callbacks
answered.

Usage:
    legacy_stdio_server.py stdio
    legacy_stdio_server.py streamable-http [--host 127.0.0.1] [--port 0] [--path /mcp]
    legacy_stdio_server.py sse [--host 127.0.0.1] [--port 0]

Over HTTP the server binds its socket itself (port 0: any free port) and, once uvicorn has
started, prints one line on stdout, `listening on URL`, with the URL a client connects to
(`.../mcp` for Streamable HTTP, `.../sse` for HTTP+SSE). A test learns the port from that line,
so no port is ever guessed.

The tools call the SDK the way its own documentation shows, nothing more: `ctx.elicit` ties
the elicitation to the tool call, while `create_message` and `list_roots` are sent without a
related request id. Over Streamable HTTP those two therefore travel on the standalone GET
stream, which is what real FastMCP servers do and what a gateway has to cope with.
"""

from __future__ import annotations

import argparse
import socket
import sys

import anyio
import uvicorn

from mcp.server.elicitation import AcceptedElicitation, DeclinedElicitation
from mcp.server.fastmcp import Context, FastMCP
from mcp.types import SamplingMessage, TextContent
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


def build_server(host: str, port: int, path: str) -> FastMCP:
    """The server with its five tools. Host and port go to the constructor, because FastMCP
    derives its DNS-rebinding allow-list from the host it was built with."""
    mcp = FastMCP("interop-legacy", host=host, port=port, streamable_http_path=path, log_level="WARNING")

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


async def serve_http(mcp: FastMCP, transport: str, host: str, port: int) -> None:
    """Serve the FastMCP app the way `FastMCP.run` does (uvicorn, same app), but on a socket
    bound here, so port 0 works and the real port can be announced once requests are served."""
    if transport == "streamable-http":
        app, path = mcp.streamable_http_app(), mcp.settings.streamable_http_path
    else:
        app, path = mcp.sse_app(), mcp.settings.sse_path
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
    args = parser.parse_args(argv)

    mcp = build_server(args.host, args.port, args.path)
    if args.transport == "stdio":
        mcp.run("stdio")
    else:
        anyio.run(serve_http, mcp, args.transport, args.host, args.port)


if __name__ == "__main__":
    main(sys.argv[1:])
