"""A legacy MCP server built with FastMCP from the Python SDK 1.30.0, unmodified.

Its tools push server-to-client requests in the middle of a call, the way 2024-11-05 ..
2025-11-25 servers do: form elicitation, sampling and roots/list. The interop tests put the
gateway in front of it and expect a 2026-07-28 client to see exactly what its own callbacks
answered.

Usage:
    legacy_stdio_server.py stdio
    legacy_stdio_server.py streamable-http [--host 127.0.0.1] [--port 8000] [--path /mcp]
    legacy_stdio_server.py sse [--host 127.0.0.1] [--port 8000]

The tools call the SDK the way its own documentation shows, nothing more: `ctx.elicit` ties
the elicitation to the tool call, while `create_message` and `list_roots` are sent without a
related request id. Over Streamable HTTP those two therefore travel on the standalone GET
stream, which is what real FastMCP servers do and what a gateway has to cope with.
"""

from __future__ import annotations

import argparse
import sys

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
    """The server with its four tools. Host and port go to the constructor, because FastMCP
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
    async def everything(ctx: Context, message: str = "What is your name?", prompt: str = "Say hello") -> str:
        """Elicit, sample and list roots in sequence within one call; returns 'name|sampled|roots'."""
        name = await _ask_name(ctx, message)
        sampled = await _ask_llm(ctx, prompt)
        root_uris = await _roots(ctx)
        return f"{name}|{sampled}|{root_uris}"

    return mcp


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("transport", choices=["stdio", "streamable-http", "sse"])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--path", default="/mcp", help="Streamable HTTP endpoint path")
    args = parser.parse_args(argv)

    build_server(args.host, args.port, args.path).run(args.transport)


if __name__ == "__main__":
    main(sys.argv[1:])
