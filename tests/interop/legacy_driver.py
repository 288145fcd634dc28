"""Drives a legacy MCP server with the Python MCP SDK 1.30.0 `ClientSession`, the way a
2024-11-05 .. 2025-11-25 client does: `initialize`, then server-to-client requests pushed in the
middle of a call and answered by the session's callbacks.

Against a Streamable HTTP URL (the server's own, or a gateway's legacy face in front of it) or,
with `--sse`, a 2024-11-05 HTTP+SSE URL, it calls every tool of the server named by `--server`
and checks that each result is exactly what its callbacks answered:
- `fastmcp`, the tools of `legacy_stdio_server.py`: `ask_name` accepted, declined and
  cancelled, `ask_llm` (sampling), `roots`, `everything` (all three in one call) and `whoami`
  (any text);
- `modern`, the 2026-07-28 server `modern_server.py` (reached through the gateway's reverse
  bridge): `echo`, `ask_name` accepted, declined and cancelled, `ask_sample`, `ask_roots`,
  `two_rounds` (three round trips: elicit, then sample, then the result), `progress` (with
  its log messages once `logging/setLevel` was sent) and `fail`;
- `fixture`, the project's own legacy server: `echo`, `ask_form` accepted, declined and
  cancelled, `sample`, `list_roots`, `all_three`, `two_step` (two elicitations, the second
  quoting the first answer), `progress` (its notifications), `log_levels` (its log messages,
  after `logging/setLevel`), and `fail` both as a JSON-RPC error and as an `isError` result.
Both also get `ping`, `tools/list` and `logging/setLevel` (FastMCP: only if it declares
`logging`). Besides each result, a check compares the server requests its call raised (the
elicitation messages, the sampling prompts, the roots lists), so a request asked twice, lost,
or handed to the wrong client shows.

The callbacks' answers derive from `--tag` (the name `name-TAG`, samples `llm-TAG:PROMPT`,
roots under `file:///legacy/TAG`), so two drivers at once answer differently and a mixed-up
reply shows. An elicitation whose message contains `[decline]` or `[cancel]` is declined or
cancelled; any other is accepted.

Usage:
    legacy_driver.py URL --server fastmcp|fixture|modern [--sse] [--tag alice] [--bearer TOKEN]
                     [--timeout 90] [--skip NAME]...

`--skip NAME` (repeatable) leaves out the check of that name. Every check runs within
`--timeout` seconds for the whole run; one that has not finished by then fails with its name.

Prints one JSON line (the summary) on stdout: `ok`, the names of the checks `passed`, the
`failed` ones (`{"check", "why"}`), the `skipped` ones, and the `session_id` the server gave
(`Mcp-Session-Id` over Streamable HTTP, the endpoint's `session_id` over HTTP+SSE). Exit status
0 only if every check passed; the failures are also written readably to stderr.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import traceback
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import anyio
import httpx
from mcp import ClientSession, types
from mcp.client.sse import sse_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import McpError

FASTMCP_TOOLS = ["ask_llm", "ask_name", "everything", "roots", "whoami"]
FIXTURE_TOOLS = [
    "all_three",
    "ask_form",
    "echo",
    "fail",
    "list_roots",
    "log_levels",
    "progress",
    "sample",
    "two_step",
]
# What the fixture asks when a tool takes no question of its own.
FIXTURE_FORM_MESSAGE = "What is your name?"
FIXTURE_PROMPT = "Say hello in five words or fewer."
LOG_LEVELS = ["debug", "info", "notice", "warning", "error", "critical", "alert", "emergency"]
PROGRESS_STEPS = 3
FAIL_CODE = -32000
# The token limits the two servers ask for; a relay must carry them through unchanged.
FASTMCP_MAX_TOKENS = 50
FIXTURE_MAX_TOKENS = 64
# Time left for closing the session once the checks are done (or out of time).
CLOSE_GRACE = 10.0


@dataclass
class Answers:
    """What this driver's callbacks answer, all derived from the tag."""

    tag: str

    @property
    def name(self) -> str:
        return f"name-{self.tag}"

    @property
    def confirm(self) -> str:
        return f"yes-{self.tag}"

    def sampled(self, prompt: str) -> str:
        # Echo the prompt so a check also proves the request's message arrived intact.
        return f"llm-{self.tag}:{prompt}"

    @property
    def model(self) -> str:
        return f"legacy-model-{self.tag}"

    @property
    def roots(self) -> list[str]:
        return [f"file:///legacy/{self.tag}", f"file:///legacy/{self.tag}/second"]


def elicited(message: str) -> list[str]:
    """How `Session.asked` records an elicitation."""
    return ["elicitation", message]


def sampled(prompt: str, max_tokens: int) -> list[Any]:
    """How `Session.asked` records a sampling request: its one prompt and its token limit."""
    return ["sampling", prompt, max_tokens]


ROOTS_LISTED = ["roots"]


class Skip(Exception):
    """A check that does not apply to this server (the reason is the message)."""


@dataclass
class Report:
    tag: str
    url: str
    passed: list[str] = field(default_factory=list)
    failed: list[dict[str, Any]] = field(default_factory=list)
    skipped: list[dict[str, str]] = field(default_factory=list)
    session_id: str | None = None
    protocol: str | None = None

    def fail(self, check: str, why: Any) -> None:
        self.failed.append({"check": check, "why": why})


@dataclass
class Session:
    """The client session and what reached its callbacks, in arrival order."""

    answers: Answers
    client: ClientSession | None = None
    protocol: str = ""
    asked: list[list[Any]] = field(default_factory=list)
    logs: list[list[Any]] = field(default_factory=list)

    async def on_elicit(self, context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        message = getattr(params, "message", repr(params))
        self.asked.append(elicited(message))
        if "[decline]" in message:
            return types.ElicitResult(action="decline")
        if "[cancel]" in message:
            return types.ElicitResult(action="cancel")
        # The fixture's `two_step` asks to confirm with an `answer` field; everything else a name.
        properties = (getattr(params, "requestedSchema", None) or {}).get("properties", {})
        content = {"answer": self.answers.confirm} if "answer" in properties else {"name": self.answers.name}
        return types.ElicitResult(action="accept", content=content)

    async def on_sample(self, context: Any, params: types.CreateMessageRequestParams) -> types.CreateMessageResult:
        texts = [m.content.text for m in params.messages if isinstance(m.content, types.TextContent)]
        prompt = texts[0] if len(texts) == 1 else repr([m.model_dump(mode="json") for m in params.messages])
        self.asked.append(sampled(prompt, params.maxTokens))
        return types.CreateMessageResult(
            role="assistant",
            content=types.TextContent(type="text", text=self.answers.sampled(prompt)),
            model=self.answers.model,
            stopReason="endTurn",
        )

    async def on_roots(self, context: Any) -> types.ListRootsResult:
        self.asked.append(ROOTS_LISTED)
        roots = [types.Root(uri=uri, name=f"{self.answers.tag}-{i}") for i, uri in enumerate(self.answers.roots)]
        return types.ListRootsResult(roots=roots)

    async def on_log(self, params: types.LoggingMessageNotificationParams) -> None:
        self.logs.append([params.level, params.logger, params.data])

    async def call(self, tool: str, arguments: dict[str, Any], **options: Any) -> dict[str, Any]:
        """Calls `tool`; returns its outcome and the server requests raised meanwhile."""
        assert self.client is not None
        start = len(self.asked)
        result = await self.client.call_tool(tool, arguments, **options)
        return {"result": outcome(result), "asked": self.asked[start:]}

    async def call_json(self, tool: str, arguments: dict[str, Any], **options: Any) -> dict[str, Any]:
        """`call` for the fixture, whose results are one text block holding a JSON document."""
        got = await self.call(tool, arguments, **options)
        if isinstance(got["result"], str):
            try:
                got["result"] = json.loads(got["result"])
            except json.JSONDecodeError:
                pass
        return got


def outcome(result: types.CallToolResult) -> Any:
    """The single text block of a successful result, or a description of what came instead."""
    blocks = [c.model_dump(mode="json", exclude_none=True) for c in result.content]
    if result.isError:
        return {"isError": True, "content": blocks}
    if len(result.content) == 1 and isinstance(result.content[0], types.TextContent):
        return result.content[0].text
    return {"unexpected content": blocks}


# A check returns what it expected and what it got; they must be equal.
Check = Callable[[], Awaitable[tuple[Any, Any]]]


async def check_ping(s: Session) -> tuple[Any, Any]:
    assert s.client is not None
    return {}, (await s.client.send_ping()).model_dump(exclude_none=True)


async def check_tools(s: Session, wanted: list[str]) -> tuple[Any, Any]:
    assert s.client is not None
    listed = {tool.name for tool in (await s.client.list_tools()).tools}
    return wanted, sorted(set(wanted) & listed)


async def check_set_level(s: Session, *, required: bool) -> tuple[Any, Any]:
    assert s.client is not None
    capabilities = s.client.get_server_capabilities()
    if not required and (capabilities is None or capabilities.logging is None):
        raise Skip("the server does not declare `logging`")
    return {}, (await s.client.set_logging_level("debug")).model_dump(exclude_none=True)


def fastmcp_checks(s: Session) -> dict[str, Check]:
    a = s.answers
    tag = a.tag

    def text(tool: str, arguments: dict[str, Any], result: str, asked: list[list[Any]]) -> Check:
        async def check() -> tuple[Any, Any]:
            return {"result": result, "asked": asked}, await s.call(tool, arguments)

        return check

    async def whoami() -> tuple[Any, Any]:
        # Only its type: what credential the server saw depends on what is in front of it.
        got = await s.call("whoami", {})
        if isinstance(got["result"], str):
            got["result"] = "<text>"
        return {"result": "<text>", "asked": []}, got

    message = f"Name for {tag}?"
    decline, cancel = f"{message} [decline]", f"{message} [cancel]"
    prompt = f"prompt-{tag}"
    roots = ",".join(a.roots)
    every = f"Everything for {tag}?"
    every_prompt = f"second-prompt-{tag}"
    return {
        "ping": lambda: check_ping(s),
        "tools/list": lambda: check_tools(s, FASTMCP_TOOLS),
        "logging/setLevel": lambda: check_set_level(s, required=False),
        "ask_name accept": text("ask_name", {"message": message}, f"accepted:{a.name}", [elicited(message)]),
        "ask_name decline": text("ask_name", {"message": decline}, "declined", [elicited(decline)]),
        "ask_name cancel": text("ask_name", {"message": cancel}, "cancelled", [elicited(cancel)]),
        "ask_llm": text("ask_llm", {"prompt": prompt}, a.sampled(prompt), [sampled(prompt, FASTMCP_MAX_TOKENS)]),
        "roots": text("roots", {}, roots, [ROOTS_LISTED]),
        "everything": text(
            "everything",
            {"message": every, "prompt": every_prompt},
            f"accepted:{a.name}|{a.sampled(every_prompt)}|{roots}",
            [elicited(every), sampled(every_prompt, FASTMCP_MAX_TOKENS), ROOTS_LISTED],
        ),
        "whoami": whoami,
    }


async def check_progress(s: Session) -> tuple[Any, Any]:
    """The fixture's `progress`: its notifications reach the call's `progress_callback`."""
    seen: list[list[Any]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append([progress, total, message])

    got = await s.call_json("progress", {"steps": PROGRESS_STEPS}, progress_callback=on_progress)
    # Progress messages only exist from 2025-03-26 on.
    with_message = s.protocol >= "2025-03-26"
    steps = range(1, PROGRESS_STEPS + 1)
    notes = [[n, PROGRESS_STEPS, f"step {n} of {PROGRESS_STEPS}" if with_message else None] for n in steps]
    return {"result": {"steps": PROGRESS_STEPS}, "asked": [], "progress": notes}, {**got, "progress": seen}


async def check_log_levels(s: Session) -> tuple[Any, Any]:
    """The fixture's `log_levels`: one log message per level, in order, all before the result."""
    start = len(s.logs)
    got = await s.call_json("log_levels", {})
    logs = [[level, "fixture", f"a message at {level}"] for level in LOG_LEVELS]
    return {"result": {"sent": len(LOG_LEVELS)}, "asked": [], "logs": logs}, {**got, "logs": s.logs[start:]}


async def check_fail_error(s: Session) -> tuple[Any, Any]:
    """The fixture's `fail` answers with a JSON-RPC error: its code, message and data arrive."""
    message = f"failed on purpose for {s.answers.tag}"
    try:
        got = await s.call("fail", {"code": FAIL_CODE, "message": message})
    except McpError as exc:
        return [FAIL_CODE, message, {"asked": FAIL_CODE}], [exc.error.code, exc.error.message, exc.error.data]
    return "a JSON-RPC error", got


async def check_fail_is_error(s: Session) -> tuple[Any, Any]:
    # Without a `code` the tool fails in-band: a result with `isError`, not a JSON-RPC error.
    content = [{"type": "text", "text": "argument `code` must be an integer"}]
    return {"result": {"isError": True, "content": content}, "asked": []}, await s.call("fail", {})


def fixture_checks(s: Session) -> dict[str, Check]:
    a = s.answers
    tag = a.tag
    accepted = {"action": "accept", "content": {"name": a.name}}
    declined = {"action": "decline", "content": None}
    cancelled = {"action": "cancel", "content": None}

    def json_result(tool: str, arguments: dict[str, Any], result: Any, asked: list[list[Any]]) -> Check:
        async def check() -> tuple[Any, Any]:
            return {"result": result, "asked": asked}, await s.call_json(tool, arguments)

        return check

    def sample_of(prompt: str) -> dict[str, Any]:
        return {"role": "assistant", "text": a.sampled(prompt), "model": a.model}

    form = f"Form for {tag}?"
    decline, cancel = f"{form} [decline]", f"{form} [cancel]"
    prompt = f"prompt-{tag}"
    confirm = f"Confirm {a.name} for {tag}?"
    return {
        "ping": lambda: check_ping(s),
        "tools/list": lambda: check_tools(s, FIXTURE_TOOLS),
        "echo": json_result("echo", {"text": f"echo-{tag}"}, {"echo": f"echo-{tag}"}, []),
        "ask_form accept": json_result("ask_form", {"message": form}, accepted, [elicited(form)]),
        "ask_form decline": json_result("ask_form", {"message": decline}, declined, [elicited(decline)]),
        "ask_form cancel": json_result("ask_form", {"message": cancel}, cancelled, [elicited(cancel)]),
        "sample": json_result("sample", {"prompt": prompt}, sample_of(prompt), [sampled(prompt, FIXTURE_MAX_TOKENS)]),
        "list_roots": json_result("list_roots", {}, {"roots": a.roots, "cachedRoots": None}, [ROOTS_LISTED]),
        "all_three": json_result(
            "all_three",
            {},
            {"elicit": accepted, "sample": sample_of(FIXTURE_PROMPT), "roots": a.roots},
            [elicited(FIXTURE_FORM_MESSAGE), sampled(FIXTURE_PROMPT, FIXTURE_MAX_TOKENS), ROOTS_LISTED],
        ),
        "two_step": json_result(
            "two_step",
            {"tag": tag},
            {"tag": tag, "name": a.name, "confirm": a.confirm},
            [elicited(f"Name for {tag}?"), elicited(confirm)],
        ),
        "progress": lambda: check_progress(s),
        "logging/setLevel": lambda: check_set_level(s, required=True),
        "log_levels": lambda: check_log_levels(s),
        "fail error": lambda: check_fail_error(s),
        "fail isError": lambda: check_fail_is_error(s),
    }


MODERN_TOOLS = ["ask_name", "ask_roots", "ask_sample", "echo", "fail", "progress", "two_rounds"]
MODERN_MAX_TOKENS = 50


async def check_modern_progress(s: Session) -> tuple[Any, Any]:
    """`modern_server.py`'s `progress`: its notifications reach `progress_callback`, and its log
    messages the logging callback (the level was set first, so it rides the call's `_meta`)."""
    assert s.client is not None
    await s.client.set_logging_level("info")
    seen: list[list[Any]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append([progress, total, message])

    start = len(s.logs)
    got = await s.call("progress", {"steps": PROGRESS_STEPS}, progress_callback=on_progress)
    steps = range(1, PROGRESS_STEPS + 1)
    notes = [[float(n), float(PROGRESS_STEPS), f"step {n} of {PROGRESS_STEPS}"] for n in steps]
    logs = [f"progress step {n}" for n in steps]
    got_logs = [entry[2] for entry in s.logs[start:]]
    return (
        {"result": f"done:{PROGRESS_STEPS}", "asked": [], "progress": notes, "logs": logs},
        {**got, "progress": seen, "logs": got_logs},
    )


async def check_modern_fail(s: Session) -> tuple[Any, Any]:
    """`modern_server.py`'s `fail`: the backend's JSON-RPC error arrives as it was raised."""
    message = f"failed on purpose for {s.answers.tag}"
    try:
        got = await s.call("fail", {"code": FAIL_CODE, "message": message})
    except McpError as exc:
        return [FAIL_CODE, message, {"server": "interop-modern"}], [exc.error.code, exc.error.message, exc.error.data]
    return "a JSON-RPC error", got


def modern_checks(s: Session) -> dict[str, Check]:
    """The tools of `modern_server.py`, a 2026-07-28 server reached through the reverse bridge:
    its `InputRequiredResult` rounds arrive as requests to this client."""
    a = s.answers
    tag = a.tag

    def text(tool: str, arguments: dict[str, Any], result: str, asked: list[list[Any]]) -> Check:
        async def check() -> tuple[Any, Any]:
            return {"result": result, "asked": asked}, await s.call(tool, arguments)

        return check

    message = f"Name for {tag}?"
    decline, cancel = f"{message} [decline]", f"{message} [cancel]"
    prompt = f"prompt-{tag}"
    return {
        "ping": lambda: check_ping(s),
        "tools/list": lambda: check_tools(s, MODERN_TOOLS),
        "echo": text("echo", {"text": f"echo-{tag}"}, f"echo-{tag}", []),
        "ask_name accept": text("ask_name", {"message": message}, f"accepted:{a.name}", [elicited(message)]),
        "ask_name decline": text("ask_name", {"message": decline}, "declined", [elicited(decline)]),
        "ask_name cancel": text("ask_name", {"message": cancel}, "cancelled", [elicited(cancel)]),
        "ask_sample": text(
            "ask_sample", {"prompt": prompt}, a.sampled(prompt), [sampled(prompt, MODERN_MAX_TOKENS)]
        ),
        "ask_roots": text("ask_roots", {}, ",".join(a.roots), [ROOTS_LISTED]),
        "two_rounds": text(
            "two_rounds",
            {"message": message, "prompt": prompt},
            f"accepted:{a.name}|{a.sampled(prompt)}",
            [elicited(message), sampled(prompt, MODERN_MAX_TOKENS)],
        ),
        "progress": lambda: check_modern_progress(s),
        "fail error": lambda: check_modern_fail(s),
    }


CHECKS = {"fastmcp": fastmcp_checks, "fixture": fixture_checks, "modern": modern_checks}


@asynccontextmanager
async def connect(args: argparse.Namespace, s: Session, report: Report) -> AsyncIterator[None]:
    """An initialized session (as `s.client`) over the transport `args` name, with this
    driver's callbacks; the server's session id and protocol version go to `report`."""
    headers = {"Authorization": f"Bearer {args.bearer}"} if args.bearer else None
    async with AsyncExitStack() as stack:
        if args.sse:

            def on_session_created(session_id: str) -> None:
                report.session_id = session_id

            read, write = await stack.enter_async_context(
                sse_client(
                    args.url,
                    headers=headers,
                    timeout=30.0,
                    sse_read_timeout=args.timeout,
                    on_session_created=on_session_created,
                )
            )
            session_id = None
        else:
            # A long read timeout: a server holds a response stream open while a call waits.
            timeout = httpx.Timeout(30.0, read=args.timeout)
            http = await stack.enter_async_context(httpx.AsyncClient(headers=headers, timeout=timeout))
            transport = streamable_http_client(args.url, http_client=http)
            read, write, session_id = await stack.enter_async_context(transport)
        s.client = await stack.enter_async_context(
            ClientSession(
                read,
                write,
                read_timeout_seconds=timedelta(seconds=args.timeout),
                elicitation_callback=s.on_elicit,
                sampling_callback=s.on_sample,
                list_roots_callback=s.on_roots,
                logging_callback=s.on_log,
                client_info=types.Implementation(name=f"legacy-driver-{s.answers.tag}", version="1.0.0"),
            )
        )
        initialized = await s.client.initialize()
        report.protocol = s.protocol = str(initialized.protocolVersion)
        if session_id is not None:
            report.session_id = session_id()
        yield


async def run_checks(checks: dict[str, Check], skip: set[str], report: Report, deadline: float) -> None:
    """Runs each check in turn, each within what is left of the run's time."""
    for name, check in checks.items():
        if name in skip:
            report.skipped.append({"check": name, "why": "--skip"})
            continue
        left = deadline - time.monotonic()
        if left <= 0:
            report.fail(name, "not run: the run's time was up")
            continue
        try:
            with anyio.fail_after(left):
                expected, got = await check()
        except Skip as exc:
            report.skipped.append({"check": name, "why": str(exc)})
            continue
        except TimeoutError:
            report.fail(name, f"no answer within the run's {left:.1f}s left")
            continue
        except Exception as exc:  # noqa: BLE001 - one failed check must not hide the others
            report.fail(name, describe(exc))
            continue
        if expected == got:
            report.passed.append(name)
        else:
            report.fail(name, {"expected": expected, "got": got})


async def run(args: argparse.Namespace) -> Report:
    report = Report(tag=args.tag, url=args.url)
    s = Session(Answers(args.tag))
    checks = CHECKS[args.server](s)
    deadline = time.monotonic() + args.timeout
    connected = False
    try:
        # The checks are bounded by the deadline; this outer bound also covers connecting and
        # closing, so nothing the server does can make the driver hang.
        with anyio.fail_after(args.timeout + CLOSE_GRACE):
            async with connect(args, s, report):
                connected = True
                await run_checks(checks, set(args.skip), report, deadline)
    except TimeoutError:
        step = "session closed" if connected else "connect"
        report.fail(step, f"gave up after {args.timeout + CLOSE_GRACE}s")
    except Exception as exc:  # noqa: BLE001 - report the failure as a result, never a bare crash
        report.fail("session closed" if connected else "connect", describe(exc))
    return report


def describe(exc: BaseException) -> str:
    # Exception groups from anyio task groups hide the cause in their sub-exceptions.
    return "".join(traceback.format_exception(exc)).strip()


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("url", help="the Streamable HTTP endpoint (.../mcp), or with --sse the SSE one (.../sse)")
    parser.add_argument("--server", required=True, choices=sorted(CHECKS), help="which server's tools to drive")
    parser.add_argument("--sse", action="store_true", help="speak 2024-11-05 HTTP+SSE instead of Streamable HTTP")
    parser.add_argument("--tag", default="alice", help="makes this driver's answers unique")
    parser.add_argument("--bearer", help="send 'Authorization: Bearer TOKEN' on every HTTP request")
    parser.add_argument("--timeout", type=float, default=90.0, help="seconds for the whole run")
    parser.add_argument("--skip", action="append", default=[], metavar="NAME", help="leave out this check")
    args = parser.parse_args(argv)
    known = CHECKS[args.server](Session(Answers(args.tag)))
    unknown = sorted(set(args.skip) - set(known))
    if unknown:
        parser.error(f"--skip {unknown}: no such check for --server {args.server} (checks: {sorted(known)})")

    started = time.monotonic()
    report = anyio.run(run, args)
    ok = not report.failed and bool(report.passed)
    summary = {
        "ok": ok,
        "tag": report.tag,
        "url": report.url,
        "protocol": report.protocol,
        "session_id": report.session_id,
        "passed": report.passed,
        "failed": report.failed,
        "skipped": report.skipped,
        "seconds": round(time.monotonic() - started, 3),
    }
    print(json.dumps(summary, sort_keys=True), flush=True)
    if not ok:
        print(f"legacy_driver[{report.tag}]: {len(report.failed)} check(s) failed", file=sys.stderr)
        for failure in report.failed:
            print(json.dumps(failure, indent=2, sort_keys=True), file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
