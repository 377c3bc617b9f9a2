"""A 2026-07-28 upstream on the official Python SDK (its MCPServer over streamable HTTP), for the gateway's tests of
speaking that revision to a remote server (contract 15, "Parameter headers"). Usage: modern_upstream.py PORT

Tools:
  regional(region)  `region` is an `x-mcp-header` parameter (`Mcp-Param-Region`); answers JSON: the region and the
                    `mcp-*` headers of the request that carried the call
  confirm()         asks the client to confirm (an elicitation; in 2026-07-28 an `input_required` round); answers
                    "confirmed: true" or "confirmed: false"
  touch(uri)        tells its `subscriptions/listen` streams that its tools changed and that `uri` was updated

Resource: test://watched (text).
"""

import json
import sys
from typing import Annotated

from pydantic import BaseModel, Field

from mcp.server.mcpserver import Context, Elicit, MCPServer, Resolve

app = MCPServer("modern-upstream")


@app.tool()
def regional(region: Annotated[str, Field(json_schema_extra={"x-mcp-header": "Region"})], ctx: Context) -> str:
    """Answers the region and the request's Mcp-* headers."""
    headers = {name.lower(): value for name, value in (ctx.headers or {}).items()}
    seen = {name: value for name, value in headers.items() if name.startswith("mcp-")}
    return json.dumps({"region": region, "headers": seen}, sort_keys=True)


class Answer(BaseModel):
    ok: bool


def ask() -> Elicit[Answer]:
    return Elicit("Proceed?", Answer)


@app.tool()
def confirm(answer: Annotated[Answer, Resolve(ask)]) -> str:
    """Asks the client to confirm."""
    return f"confirmed: {str(answer.ok).lower()}"


@app.tool()
async def touch(uri: str, ctx: Context) -> str:
    """Tells the listen streams of a tools change and of an update of `uri`."""
    await ctx.notify_tools_changed()
    await ctx.notify_resource_updated(uri)
    return "touched"


@app.resource("test://watched")
def watched() -> str:
    return "watched text"


app.run("streamable-http", host="127.0.0.1", port=int(sys.argv[1]))
