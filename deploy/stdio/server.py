"""An example legacy MCP server (stdio, PyPI mcp 1.x) for the derived image.

Its one tool asks the user a question in the middle of the call, which a 2026-07-28 client can
only answer through the gateway.
"""

from mcp.server.fastmcp import Context, FastMCP
from pydantic import BaseModel

mcp = FastMCP("example-legacy")


class Name(BaseModel):
    name: str


@mcp.tool()
async def greet(ctx: Context) -> str:
    """Ask for a name, then greet it."""
    answer = await ctx.elicit("What is your name?", schema=Name)
    if answer.action == "accept":
        return f"Hello, {answer.data.name}!"
    return f"No name given ({answer.action})."


if __name__ == "__main__":
    mcp.run("stdio")
