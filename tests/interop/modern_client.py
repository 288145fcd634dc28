"""A 2026-07-28 client built with the Python MCP SDK 2.3.0, driving a server over Streamable HTTP.

It registers elicitation, sampling and roots callbacks whose answers are derived from `--tag`,
so two clients running at once give different answers and a mixed-up reply shows. It calls
every tool of `legacy_stdio_server.py` and checks that each result is exactly what its own
callbacks answered; it also drives one call by hand to check the raw `input_required` result.

Every request the server sends names the client it belongs to (elicitation messages say
"for TAG?", sampling prompts end in "prompt-TAG"); a callback that is handed another client's
request records a failure, so two clients at once prove neither sees the other's requests.
With `--expect-authorization`, the `whoami` tool must report that the backend received exactly
this Authorization header value ("<none>": no header) with the call.

Usage:
    modern_client.py URL [--tag alice] [--bearer TOKEN] [--timeout 90]
                         [--expect-authorization VALUE]

Prints one JSON line (the summary) on stdout. Exit status 0 only if every check passed; on a
failure the summary lists what differed, and the same is written readably to stderr.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import traceback
from dataclasses import dataclass, field
from typing import Any

import anyio
import httpx2
from mcp import Client, types
from mcp.client import ClientRequestContext
from mcp.client.streamable_http import streamable_http_client

PROTOCOL = "2026-07-28"
# The legacy server asks for this many tokens; a gateway must carry it through unchanged.
EXPECTED_MAX_TOKENS = 50
EXPECTED_TOOLS = {"ask_name", "ask_llm", "roots", "whoami", "everything"}


@dataclass
class Answers:
    """What this client's callbacks answer, all derived from the tag."""

    tag: str

    @property
    def name(self) -> str:
        return f"name-{self.tag}"

    def sampled(self, prompt: str) -> str:
        # Echo the prompt so the test also proves the request's messages arrived intact.
        return f"llm-{self.tag}:{prompt}"

    def owns_message(self, message: str) -> bool:
        """Whether an elicitation message was one this client's calls asked for."""
        return f"for {self.tag}?" in message

    def owns_prompt(self, prompt: str) -> bool:
        return prompt.endswith(f"prompt-{self.tag}")

    @property
    def roots(self) -> list[str]:
        return [f"file:///interop/{self.tag}", f"file:///interop/{self.tag}/second"]


@dataclass
class Report:
    tag: str
    url: str
    passed: list[str] = field(default_factory=list)
    failures: list[dict[str, Any]] = field(default_factory=list)
    callbacks: dict[str, int] = field(default_factory=lambda: {"elicitation": 0, "sampling": 0, "roots": 0})

    def check(self, name: str, expected: Any, got: Any) -> None:
        if expected == got:
            self.passed.append(name)
        else:
            self.failures.append({"check": name, "expected": expected, "got": got})

    def fail(self, name: str, detail: Any) -> None:
        self.failures.append({"check": name, "error": detail})


def make_callbacks(answers: Answers, report: Report) -> dict[str, Any]:
    """The three callbacks, as keyword arguments for `Client`. Anything unexpected in what the
    server asked is recorded as a failure, but the callback still answers so the call can end."""

    async def on_elicit(
        context: ClientRequestContext, params: types.ElicitRequestParams
    ) -> types.ElicitResult | types.ErrorData:
        report.callbacks["elicitation"] += 1
        if not isinstance(params, types.ElicitRequestFormParams):
            report.fail("elicitation is form mode", repr(params))
            return types.ElicitResult(action="cancel")
        properties = (params.requested_schema or {}).get("properties", {})
        if "name" not in properties:
            report.fail("elicitation schema asks for name", params.requested_schema)
        if not answers.owns_message(params.message):
            report.fail("elicitation belongs to this client", params.message)
        # The tool's message argument chooses the outcome, so every action is exercised.
        if "[decline]" in params.message:
            return types.ElicitResult(action="decline")
        if "[cancel]" in params.message:
            return types.ElicitResult(action="cancel")
        return types.ElicitResult(action="accept", content={"name": answers.name})

    async def on_sample(
        context: ClientRequestContext, params: types.CreateMessageRequestParams
    ) -> types.CreateMessageResult | types.ErrorData:
        report.callbacks["sampling"] += 1
        if params.max_tokens != EXPECTED_MAX_TOKENS:
            report.fail("sampling maxTokens", {"expected": EXPECTED_MAX_TOKENS, "got": params.max_tokens})
        texts = [m.content.text for m in params.messages if isinstance(m.content, types.TextContent)]
        if len(texts) != 1:
            report.fail("sampling carries one text message", [m.model_dump(mode="json") for m in params.messages])
        prompt = texts[0] if texts else ""
        if not answers.owns_prompt(prompt):
            report.fail("sampling belongs to this client", prompt)
        return types.CreateMessageResult(
            role="assistant",
            content=types.TextContent(type="text", text=answers.sampled(prompt)),
            model=f"interop-model-{answers.tag}",
            stop_reason="endTurn",
        )

    async def on_roots(context: ClientRequestContext) -> types.ListRootsResult | types.ErrorData:
        report.callbacks["roots"] += 1
        return types.ListRootsResult(
            roots=[types.Root(uri=uri, name=f"{answers.tag}-{i}") for i, uri in enumerate(answers.roots)]
        )

    return {"elicitation_callback": on_elicit, "sampling_callback": on_sample, "list_roots_callback": on_roots}


def tool_text(result: types.CallToolResult) -> str:
    """The single text block of a tool result, or a description of what came instead."""
    if result.is_error:
        return f"<tool error: {[c.model_dump(mode='json') for c in result.content]}>"
    texts = [c.text for c in result.content if isinstance(c, types.TextContent)]
    if len(texts) != 1 or len(result.content) != 1:
        return f"<unexpected content: {[c.model_dump(mode='json') for c in result.content]}>"
    return texts[0]


async def run_checks(client: Client, answers: Answers, report: Report, authorization: str | None) -> None:
    tag = answers.tag
    listed = {tool.name for tool in (await client.list_tools()).tools}
    report.check("tools/list has every tool", sorted(EXPECTED_TOOLS), sorted(EXPECTED_TOOLS & listed))

    async def call(check: str, tool: str, arguments: dict[str, Any], expected: str) -> None:
        try:
            got = tool_text(await client.call_tool(tool, arguments))
        except Exception as exc:  # noqa: BLE001 - one failed call must not hide the other checks
            report.fail(check, _describe(exc))
            return
        report.check(check, expected, got)

    # Every action of a form elicitation, with a message unique to this client.
    await call("ask_name accept", "ask_name", {"message": f"Name for {tag}?"}, f"accepted:{answers.name}")
    await call("ask_name decline", "ask_name", {"message": f"Name for {tag}? [decline]"}, "declined")
    await call("ask_name cancel", "ask_name", {"message": f"Name for {tag}? [cancel]"}, "cancelled")

    prompt = f"prompt-{tag}"
    await call("ask_llm sampling", "ask_llm", {"prompt": prompt}, answers.sampled(prompt))
    await call("roots list", "roots", {}, ",".join(answers.roots))

    # Three input rounds within one backend call.
    prompt2 = f"second-prompt-{tag}"
    await call(
        "everything in sequence",
        "everything",
        {"message": f"Everything for {tag}?", "prompt": prompt2},
        f"accepted:{answers.name}|{answers.sampled(prompt2)}|{','.join(answers.roots)}",
    )

    await check_raw_round(client, answers, report)

    if authorization is not None:
        await call("backend saw the expected Authorization", "whoami", {}, authorization)

    # The automatic calls above: four elicitations, two samplings, two roots lists. More would
    # mean a round was asked twice; fewer that an answer came from somewhere else.
    report.check("callback counts", {"elicitation": 4, "sampling": 2, "roots": 2}, dict(report.callbacks))


async def check_raw_round(client: Client, answers: Answers, report: Report) -> None:
    """Drive one call by hand: the first answer must be an input_required result with a
    requestState; retrying with the answer and that exact state must complete the call."""
    message = f"Manual name for {answers.tag}?"
    try:
        first = await client.session.call_tool("ask_name", {"message": message}, allow_input_required=True)
    except Exception as exc:  # noqa: BLE001
        report.fail("raw first round", _describe(exc))
        return
    if not isinstance(first, types.InputRequiredResult):
        report.fail("raw first round is input_required", first.model_dump(mode="json", by_alias=True))
        return
    state = first.request_state
    report.check("raw requestState is a non-empty string", True, isinstance(state, str) and len(state) > 0)
    requests = first.input_requests or {}
    elicitations = {k: r for k, r in requests.items() if isinstance(r, types.ElicitRequest)}
    report.check("raw round asks one elicitation", 1, len(elicitations))
    report.check("raw round asks nothing else", len(elicitations), len(requests))
    if len(elicitations) != 1:
        return
    key, request = next(iter(elicitations.items()))
    report.check("raw elicitation message", message, getattr(request.params, "message", None))

    manual_name = f"manual-{answers.tag}"
    try:
        done = await client.session.call_tool(
            "ask_name",
            {"message": message},
            input_responses={key: types.ElicitResult(action="accept", content={"name": manual_name})},
            request_state=state,
            allow_input_required=True,
        )
    except Exception as exc:  # noqa: BLE001
        report.fail("raw retry", _describe(exc))
        return
    if not isinstance(done, types.CallToolResult):
        report.fail("raw retry completes", done.model_dump(mode="json", by_alias=True))
        return
    report.check("raw retry result", f"accepted:{manual_name}", tool_text(done))


def _describe(exc: BaseException) -> str:
    # Exception groups from anyio task groups hide the cause in their sub-exceptions.
    return "".join(traceback.format_exception(exc)).strip()


async def run(args: argparse.Namespace) -> Report:
    report = Report(tag=args.tag, url=args.url)
    answers = Answers(args.tag)
    headers = {"Authorization": f"Bearer {args.bearer}"} if args.bearer else {}
    # The SDK's own client factory is private; this is the same configuration (long read timeout,
    # because a server may hold a response stream open) plus our headers.
    http = httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30.0, read=args.timeout))
    try:
        with anyio.fail_after(args.timeout):
            async with http:
                transport = streamable_http_client(args.url, http_client=http)
                async with Client(
                    transport,
                    mode=PROTOCOL,
                    read_timeout_seconds=args.timeout,
                    **make_callbacks(answers, report),
                ) as client:
                    report.check("negotiated protocol", PROTOCOL, client.protocol_version)
                    await run_checks(client, answers, report, args.expect_authorization)
    except TimeoutError:
        report.fail("finished in time", f"gave up after {args.timeout}s")
    except Exception as exc:  # noqa: BLE001 - report the failure as a result, never a bare crash
        report.fail("client ran", _describe(exc))
    return report


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("url", help="the 2026-07-28 Streamable HTTP endpoint, e.g. http://127.0.0.1:8080/mcp")
    parser.add_argument("--tag", default="alice", help="makes this client's answers unique")
    parser.add_argument("--bearer", help="send 'Authorization: Bearer TOKEN' on every request")
    parser.add_argument("--timeout", type=float, default=90.0, help="seconds for the whole run")
    parser.add_argument(
        "--expect-authorization",
        help="the Authorization value the backend must report from `whoami` ('<none>': no header)",
    )
    args = parser.parse_args(argv)

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
        print(f"modern_client[{report.tag}]: {len(report.failures)} check(s) failed", file=sys.stderr)
        for failure in report.failures:
            print(json.dumps(failure, indent=2, sort_keys=True), file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
