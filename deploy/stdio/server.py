"""An example legacy MCP server (stdio, PyPI mcp 1.x) for the derived image.

Its one tool asks the user a question in the middle of the call, which a 2026-07-28 client can
only answer through the gateway. It changes nothing, and says so in its annotations: a gateway
with `replay = "auto"` may then run it again on any replica instead of holding it on one.
"""

from mcp.server.fastmcp import Context, FastMCP
from mcp.types import ToolAnnotations
from pydantic import BaseModel

mcp = FastMCP("example-legacy")


class Name(BaseModel):
    name: str


@mcp.tool(annotations=ToolAnnotations(readOnlyHint=True, idempotentHint=True))
async def greet(ctx: Context) -> str:
    """Ask for a name, then greet it."""
    answer = await ctx.elicit("What is your name?", schema=Name)
    if answer.action == "accept":
        return f"Hello, {answer.data.name}!"
    return f"No name given ({answer.action})."


if __name__ == "__main__":
    mcp.run("stdio")
