"""Drives `modern_server.py` with the Python MCP SDK 2.3.0 `Client(mode="2026-07-28")`.

Against a Streamable HTTP URL (the server's own, or a gateway's in front of it) or a stdio
command, it calls every tool, the prompt and the resource template of `modern_server.py`, with
the elicitation, sampling and roots callbacks of `modern_client.py` (answers derived from
`--tag`, so two drivers at once answer differently and a mixed-up reply shows), and checks that
each result is exactly what its callbacks answered. It also checks:
- `server/discover`, progress and log notifications;
- one round driven by hand (the raw `input_required` result and its retry);
- that the server refuses a retry whose state it did not mint, and one with answers but no state;
- that the server's errors arrive with their code, message and data;
- that cancelling a call (closing its stream; over stdio, `notifications/cancelled`) reaches
  the server;
- that a `subscriptions/listen` stream receives the events a call makes the server send;
- what reached the server with a call (`seen`): the `_meta` this client sent (protocol version,
  capabilities, client info, a `traceparent`) and, over HTTP, the 2026 headers
  (`MCP-Protocol-Version`, `Mcp-Method`, `Mcp-Name`, `Mcp-Param-Region`), unless
  `--server-over-stdio` says the server behind URL is a gateway's stdio child. With
  `--expect-authorization`, the server must have received exactly that `Authorization` value
  ('<none>': no header).

Usage:
    modern_driver.py URL [--tag alice] [--bearer TOKEN] [--timeout 90]
                         [--expect-authorization VALUE] [--server-over-stdio]
    modern_driver.py [--tag alice] [--timeout 90] --stdio COMMAND [ARG...]

Prints one JSON line (the summary) on stdout. Exit status 0 only if every check passed; on a
failure the summary lists what differed, and the same is written readably to stderr.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

import anyio
import httpx2
from mcp import Client, types
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.client.subscriptions import ResourceUpdated, ToolsListChanged
from mcp.shared.exceptions import MCPError
from modern_client import Answers, Report, _describe, check_raw_round, make_callbacks, tool_text

PROTOCOL = "2026-07-28"
EXPECTED_TOOLS = {
    "echo",
    "ask_name",
    "ask_sample",
    "ask_roots",
    "two_rounds",
    "progress",
    "fail",
    "slow",
    "outcome",
    "changed",
    "seen",
}
PROGRESS_STEPS = 3
# 2026-07-28 errors (missing capability, URL elicitation required) and a plain internal error.
ERROR_CODES = [-32021, -32042, -32603]
# How long the server may take to notice a cancelled call.
CANCEL_NOTICED = 10.0
TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def client_info(tag: str) -> types.Implementation:
    return types.Implementation(name=f"modern-driver-{tag}", version="1.0.0")


class Notifications:
    """The progress and log notifications that reached this client."""

    def __init__(self) -> None:
        self.logs: list[Any] = []

    async def on_log(self, params: types.LoggingMessageNotificationParams) -> None:
        self.logs.append(params.data)


async def run_checks(
    client: Client,
    answers: Answers,
    report: Report,
    notes: Notifications,
    *,
    over_http: bool,
    authorization: str | None,
) -> None:
    tag = answers.tag
    report.check("negotiated protocol", PROTOCOL, client.protocol_version)
    await check_discover(client, report)
    listed = {tool.name for tool in (await client.list_tools()).tools}
    report.check("tools/list has every tool", sorted(EXPECTED_TOOLS), sorted(EXPECTED_TOOLS & listed))

    async def call(check: str, tool: str, arguments: dict[str, Any], expected: str) -> None:
        try:
            got = tool_text(await client.call_tool(tool, arguments))
        except Exception as exc:  # noqa: BLE001 - one failed call must not hide the other checks
            report.fail(check, _describe(exc))
            return
        report.check(check, expected, got)

    await call("echo", "echo", {"text": f"echo-{tag}"}, f"echo-{tag}")
    await call("ask_name accept", "ask_name", {"message": f"Name for {tag}?"}, f"accepted:{answers.name}")
    await call("ask_name decline", "ask_name", {"message": f"Name for {tag}? [decline]"}, "declined")
    await call("ask_name cancel", "ask_name", {"message": f"Name for {tag}? [cancel]"}, "cancelled")
    prompt = f"prompt-{tag}"
    await call("ask_sample sampling", "ask_sample", {"prompt": prompt}, answers.sampled(prompt))
    await call("ask_roots roots/list", "ask_roots", {}, ",".join(answers.roots))
    # Two InputRequiredResults in one call; the first answer rides the server's state.
    prompt2 = f"second-prompt-{tag}"
    await call(
        "two_rounds elicitation then sampling",
        "two_rounds",
        {"message": f"Two rounds for {tag}?", "prompt": prompt2},
        f"accepted:{answers.name}|{answers.sampled(prompt2)}",
    )
    await check_progress(client, report, notes)
    await check_prompt(client, answers, report)
    await check_resource(client, answers, report)
    await check_raw_round(client, answers, report)
    await check_refusals(client, answers, report)
    await check_errors(client, report)
    await check_cancel(client, answers, report)
    await check_listen(client, answers, report)
    await check_seen(client, answers, report, over_http=over_http, authorization=authorization)

    # Six elicitations (three ask_name, two_rounds, the prompt, the resource), two samplings,
    # one roots list. More would mean a round was asked twice; fewer that an answer
    # came from somewhere else.
    report.check("callback counts", {"elicitation": 6, "sampling": 2, "roots": 1}, dict(report.callbacks))


async def check_discover(client: Client, report: Report) -> None:
    # `session.discover()` would return what the pinned mode adopted at connect; this sends it.
    try:
        found = types.DiscoverResult.model_validate(await client.session.send_discover(PROTOCOL))
    except Exception as exc:  # noqa: BLE001
        report.fail("server/discover", _describe(exc))
        return
    report.check("discover lists 2026-07-28", True, PROTOCOL in found.supported_versions)
    report.check("discover offers tools", True, found.capabilities.tools is not None)


async def check_progress(client: Client, report: Report, notes: Notifications) -> None:
    seen: list[tuple[float, float | None, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append((progress, total, message))

    try:
        result = await client.call_tool("progress", {"steps": PROGRESS_STEPS}, progress_callback=on_progress)
    except Exception as exc:  # noqa: BLE001
        report.fail("progress call", _describe(exc))
        return
    report.check("progress result", f"done:{PROGRESS_STEPS}", tool_text(result))
    steps = range(1, PROGRESS_STEPS + 1)
    expected = [[s, PROGRESS_STEPS, f"step {s} of {PROGRESS_STEPS}"] for s in steps]
    report.check("progress notifications", expected, [list(p) for p in seen])
    report.check("log notifications", [f"progress step {s}" for s in steps], notes.logs)


async def check_prompt(client: Client, answers: Answers, report: Report) -> None:
    try:
        prompt = await client.get_prompt("greeting", {"message": f"Greeting for {answers.tag}?"})
    except Exception as exc:  # noqa: BLE001
        report.fail("prompts/get with input", _describe(exc))
        return
    texts = [m.content.text for m in prompt.messages if isinstance(m.content, types.TextContent)]
    report.check("prompts/get with input", [f"Hello, accepted:{answers.name}!"], texts)


async def check_resource(client: Client, answers: Answers, report: Report) -> None:
    uri = f"interop://profile/{answers.tag}"
    try:
        read = await client.read_resource(uri)
    except Exception as exc:  # noqa: BLE001
        report.fail("resources/read with input", _describe(exc))
        return
    texts = [c.text for c in read.contents if isinstance(c, types.TextResourceContents)]
    report.check("resources/read with input", [f"profile:{answers.tag}:accepted:{answers.name}"], texts)


async def check_refusals(client: Client, answers: Answers, report: Report) -> None:
    """The server must refuse a retry whose state it did not mint, and answers without a state:
    that is what makes a relay that does not hand back the server's own state fail."""
    arguments = {"message": f"Refused for {answers.tag}?"}
    accepted = {"name": types.ElicitResult(action="accept", content={"name": answers.name})}
    for check, state in [("foreign requestState refused", "not-a-state-of-this-server"), ("missing one", None)]:
        try:
            got = await client.session.call_tool(
                "ask_name", arguments, input_responses=accepted, request_state=state, allow_input_required=True
            )
        except MCPError as exc:
            report.check(f"{check}: -32602", types.INVALID_PARAMS, exc.error.code)
            continue
        except Exception as exc:  # noqa: BLE001
            report.fail(check, _describe(exc))
            continue
        report.fail(check, got.model_dump(mode="json", by_alias=True))


async def check_errors(client: Client, report: Report) -> None:
    for code in ERROR_CODES:
        message = f"failed on purpose with {code}"
        try:
            got = await client.call_tool("fail", {"code": code, "message": message})
        except MCPError as exc:
            error = exc.error
            expected = [code, message, {"server": "interop-modern"}]
            report.check(f"error {code}", expected, [error.code, error.message, error.data])
            continue
        except Exception as exc:  # noqa: BLE001
            report.fail(f"error {code}", _describe(exc))
            continue
        report.fail(f"error {code}", got.model_dump(mode="json", by_alias=True))


async def check_cancel(client: Client, answers: Answers, report: Report) -> None:
    """Cancel a `slow` call once it is under way; the server must see it cancelled."""
    key = f"cancel-{answers.tag}-{time.monotonic_ns()}"
    started = anyio.Event()

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        started.set()

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(lambda: client.call_tool("slow", {"key": key, "seconds": 60}, progress_callback=on_progress))
            with anyio.fail_after(CANCEL_NOTICED):
                await started.wait()
            tg.cancel_scope.cancel()
        # Asked until it is settled: `unknown` comes from a process the call did not reach,
        # which happens when the server runs as several (replicas, a pool of stdio children).
        outcome = "running"
        with anyio.move_on_after(CANCEL_NOTICED):
            while outcome not in ("cancelled", "completed"):
                outcome = tool_text(await client.call_tool("outcome", {"key": key}))
                await anyio.sleep(0.05)
    except Exception as exc:  # noqa: BLE001
        report.fail("cancel reaches the server", _describe(exc))
        return
    report.check("cancel reaches the server", "cancelled", outcome)


async def check_listen(client: Client, answers: Answers, report: Report) -> None:
    """A `subscriptions/listen` stream gets the events a call makes the server send. The call is
    repeated until they arrive: the server's event bus is per process, and when it runs as
    several the call may reach another one than the stream."""
    uri = f"interop://profile/{answers.tag}"
    wanted = {"tools list changed", f"updated {uri}"}
    got: set[str] = set()
    results: set[str] = set()

    async def keep_changing() -> None:
        while True:
            results.add(tool_text(await client.call_tool("changed", {"uri": uri})))
            await anyio.sleep(0.2)

    try:
        with anyio.fail_after(CANCEL_NOTICED):
            async with client.listen(tools_list_changed=True, resource_subscriptions=[uri]) as events:
                async with anyio.create_task_group() as tg:
                    tg.start_soon(keep_changing)
                    async for event in events:
                        if isinstance(event, ToolsListChanged):
                            got.add("tools list changed")
                        elif isinstance(event, ResourceUpdated):
                            got.add(f"updated {event.uri}")
                        if got >= wanted:
                            break
                    tg.cancel_scope.cancel()
    except Exception as exc:  # noqa: BLE001
        report.fail("subscriptions/listen events", {"got": sorted(got), "error": _describe(exc)})
        return
    # The events can arrive before the call that caused them returns, so there may be none.
    report.check("changed results", [], sorted(results - {f"changed:{uri}"}))
    # Only these: another client's calls at the same time may add events of their own.
    report.check("subscriptions/listen events", sorted(wanted), sorted(got & wanted))


async def check_seen(
    client: Client, answers: Answers, report: Report, *, over_http: bool, authorization: str | None
) -> None:
    """What reached the server with a call is what this client sent."""
    region = f"region-{answers.tag}"
    try:
        result = await client.call_tool("seen", {"region": region}, meta={"traceparent": TRACEPARENT})
        seen = json.loads(tool_text(result))
    except Exception as exc:  # noqa: BLE001
        report.fail("seen", _describe(exc))
        return
    meta = seen.get("meta") or {}
    report.check("seen: region argument", region, seen.get("region"))
    report.check("seen: _meta protocol version", PROTOCOL, meta.get(types.PROTOCOL_VERSION_META_KEY))
    capabilities = meta.get(types.CLIENT_CAPABILITIES_META_KEY) or {}
    report.check(
        "seen: _meta client capabilities",
        ["elicitation", "roots", "sampling"],
        sorted({"elicitation", "roots", "sampling"} & set(capabilities)),
    )
    report.check(
        "seen: _meta client info",
        client_info(answers.tag).model_dump(mode="json", exclude_none=True),
        meta.get(types.CLIENT_INFO_META_KEY),
    )
    report.check("seen: _meta traceparent", TRACEPARENT, meta.get("traceparent"))
    headers = seen.get("headers") or {}
    if over_http:
        expected = {
            "mcp-protocol-version": PROTOCOL,
            "mcp-method": "tools/call",
            "mcp-name": "seen",
            "mcp-param-region": region,
        }
        report.check("seen: 2026 headers", expected, {k: headers.get(k) for k in expected})
    if authorization is not None:
        report.check("seen: Authorization", authorization, headers.get("authorization", "<none>"))


async def run(args: argparse.Namespace) -> Report:
    report = Report(tag=args.tag, url=args.url or " ".join(args.stdio))
    answers = Answers(args.tag)
    notes = Notifications()
    options: dict[str, Any] = {
        "mode": PROTOCOL,
        "read_timeout_seconds": args.timeout,
        "logging_callback": notes.on_log,
        "log_level": "info",
        "client_info": client_info(args.tag),
        **make_callbacks(answers, report),
    }
    # The server sees the 2026 headers only when it is reached over HTTP all the way.
    over_http = not args.stdio and not args.server_over_stdio
    seen = {"over_http": over_http, "authorization": args.expect_authorization}
    try:
        with anyio.fail_after(args.timeout):
            if args.stdio:
                server = StdioServerParameters(command=args.stdio[0], args=args.stdio[1:])
                async with Client(server, **options) as client:
                    await run_checks(client, answers, report, notes, **seen)
                return report
            headers = {"Authorization": f"Bearer {args.bearer}"} if args.bearer else {}
            # A long read timeout: a server may hold a response stream open while it works.
            http = httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30.0, read=args.timeout))
            async with http:
                async with Client(streamable_http_client(args.url, http_client=http), **options) as client:
                    await run_checks(client, answers, report, notes, **seen)
    except TimeoutError:
        report.fail("finished in time", f"gave up after {args.timeout}s")
    except Exception as exc:  # noqa: BLE001 - report the failure as a result, never a bare crash
        report.fail("driver ran", _describe(exc))
    return report


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("url", nargs="?", help="the 2026-07-28 Streamable HTTP endpoint")
    # Last on the command line: everything after it is the server's command line.
    parser.add_argument("--stdio", nargs=argparse.REMAINDER, metavar="COMMAND", help="start COMMAND, speak stdio")
    parser.add_argument("--tag", default="alice", help="makes this driver's answers unique")
    parser.add_argument("--bearer", help="send 'Authorization: Bearer TOKEN' on every HTTP request")
    parser.add_argument("--timeout", type=float, default=90.0, help="seconds for the whole run")
    parser.add_argument(
        "--expect-authorization",
        help="the Authorization value the server must report from `seen` ('<none>': no header)",
    )
    parser.add_argument(
        "--server-over-stdio",
        action="store_true",
        help="the server behind URL is reached over stdio (a gateway's child): it sees no headers",
    )
    args = parser.parse_args(argv)
    if bool(args.stdio) == bool(args.url):
        parser.error("give either URL or --stdio COMMAND [ARG...]")

    started = time.monotonic()
    report = anyio.run(run, args)
    ok = not report.failures and bool(report.passed)
    summary = {
        "ok": ok,
        "tag": report.tag,
        "url": report.url,
        "passed": len(report.passed),
        "failed": len(report.failures),
        "callbacks": report.callbacks,
        "failures": report.failures,
        "seconds": round(time.monotonic() - started, 3),
    }
    print(json.dumps(summary, sort_keys=True), flush=True)
    if not ok:
        print(f"modern_driver[{report.tag}]: {len(report.failures)} check(s) failed", file=sys.stderr)
        for failure in report.failures:
            print(json.dumps(failure, indent=2, sort_keys=True), file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
