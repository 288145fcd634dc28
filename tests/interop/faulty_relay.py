"""A deliberately faulty 2026-07-28 relay: forwards each POST to a Streamable HTTP server, but
breaks one thing a relay must carry through. It exists to show that `modern_driver.py` against
`modern_server.py` notices each fault, so a passing run through the gateway means something.

Faults:
    none                forwards everything as it came (the control: the driver passes)
    drop-state          removes `requestState` from retries
    alter-state         changes the last characters of `requestState` on retries
    drop-param-headers  does not forward the `Mcp-Param-*` headers
    drop-client-info    removes the client info from the request's `_meta`
    ignore-cancel       when the client closes its stream, keeps reading the server's to the
                        end instead of closing it, so the server never learns of the cancel

Usage:
    faulty_relay.py UPSTREAM_URL[,UPSTREAM_URL...] FAULT [--host 127.0.0.1] [--port 0]

Given several upstream URLs it sends each request to the next one in turn, so a retry never
reaches the server that answered the round before it (with two).

Prints `listening on URL` once it serves, as `modern_server.py` does.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import socket
import sys
from collections.abc import AsyncIterator

import anyio
import httpx2
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import StreamingResponse
from starlette.routing import Route

FAULTS = ["none", "drop-state", "alter-state", "drop-param-headers", "drop-client-info", "ignore-cancel"]
CLIENT_INFO = "io.modelcontextprotocol/clientInfo"
# Hop-by-hop or recomputed by the client library; everything else goes upstream as sent.
NOT_FORWARDED = {"host", "content-length", "connection", "transfer-encoding"}


def break_request(fault: str, body: dict, headers: dict[str, str]) -> None:
    params = body.get("params")
    if not isinstance(params, dict):
        return
    state = params.get("requestState")
    if fault == "drop-state":
        params.pop("requestState", None)
    elif fault == "alter-state" and isinstance(state, str):
        params["requestState"] = state[:-2] + ("AA" if not state.endswith("AA") else "BB")
    elif fault == "drop-param-headers":
        for name in [h for h in headers if h.startswith("mcp-param-")]:
            del headers[name]
    elif fault == "drop-client-info":
        (params.get("_meta") or {}).pop(CLIENT_INFO, None)


def build_app(upstreams: list[str], fault: str, path: str) -> Starlette:
    turns = itertools.cycle(upstreams)
    # The tasks reading the servers' answers, kept referenced while they run.
    readers: set[asyncio.Task[None]] = set()

    async def relay(request: Request) -> StreamingResponse:
        body = json.loads(await request.body())
        headers = {k.lower(): v for k, v in request.headers.items() if k.lower() not in NOT_FORWARDED}
        break_request(fault, body, headers)
        client = httpx2.AsyncClient(timeout=httpx2.Timeout(30.0, read=120.0))
        upstream = client.build_request("POST", next(turns), content=json.dumps(body), headers=headers)
        answer = await client.send(upstream, stream=True)
        chunks: asyncio.Queue[bytes | None] = asyncio.Queue()

        async def pump() -> None:
            # Reads the server's answer in a task of its own, so a client going away does not
            # by itself close it: closing it is the relay's decision, which is the fault here.
            try:
                async for chunk in answer.aiter_raw():
                    chunks.put_nowait(chunk)
            finally:
                chunks.put_nowait(None)
                await answer.aclose()
                await client.aclose()

        reader = asyncio.get_running_loop().create_task(pump())
        readers.add(reader)
        reader.add_done_callback(readers.discard)

        async def passed_on() -> AsyncIterator[bytes]:
            # Streamed as it comes, so progress reaches the client during the call. When the
            # client goes away Starlette stops this generator, and closing the upstream answer
            # is how a relay tells the server.
            try:
                while (chunk := await chunks.get()) is not None:
                    yield chunk
            finally:
                if fault != "ignore-cancel":
                    reader.cancel()

        content_type = answer.headers.get("content-type")
        return StreamingResponse(passed_on(), status_code=answer.status_code, media_type=content_type)

    return Starlette(routes=[Route(path, relay, methods=["POST"])])


async def serve(app: Starlette, host: str, port: int, path: str) -> None:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    bound = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    stopped = anyio.Event()

    async def run() -> None:
        try:
            await server.serve([sock])
        finally:
            stopped.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(run)
        while not server.started:
            if stopped.is_set():
                raise SystemExit("uvicorn stopped before it started")
            await anyio.sleep(0.01)
        print(f"listening on http://{host}:{bound}{path}", flush=True)


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("upstreams", help="one URL, or several separated by ','")
    parser.add_argument("fault", choices=FAULTS)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--path", default="/mcp")
    args = parser.parse_args(argv)
    anyio.run(serve, build_app(args.upstreams.split(","), args.fault, args.path), args.host, args.port, args.path)


if __name__ == "__main__":
    main(sys.argv[1:])
