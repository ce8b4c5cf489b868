"""`hitl policy`: the approval-policy tooling (docs/policies.md).

- `hitl policy schema`: the JSON Schema of a policy document, for editors.
- `hitl policy check FILE`: schema and conflicts (exit 1 on an error; `--strict`: on a warning).
- `hitl policy test FILE CASES`: table-driven expectations (exit 1 when a case fails, with a
  diff per case).
- `hitl policy explain RUN CALL`: which rule decided a call of a run and why, from the policy
  version the run pinned.
- `hitl policy publish FILE`, `hitl policy apply FILE RUN...`: an admin's signed changes
  (`hitl.cli.policy_admin`).

Every input is hostile: files are size-bounded and parsed without building objects; names read
from a run are printed through the CLI's escaping stream.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
from typing import Any

from hitl.cli import policy_admin
from hitl.cli.common import EXIT_FAILED, EXIT_OK, Refused, _handle, _query
from hitl.policy import (
    CallFacts,
    LimitAnswer,
    LimitCheck,
    PolicyDocument,
    Verdict,
    digest_of,
    evaluate,
    from_data,
    load_policy,
)
from hitl.policy.analysis import check
from hitl.policy.cases import load_cases, run_cases
from hitl.policy.evaluate import Unknown, render_key

EXIT_CASES_FAILED = 1


def add_parser(sub: Any) -> None:
    """The `policy` subcommand and its own subcommands."""
    p = sub.add_parser(
        "policy", help="approval policies: schema, check, test, explain, publish, apply"
    )
    ps = p.add_subparsers(dest="policy_command", required=True, metavar="ACTION")
    ps.add_parser("schema", help="print the JSON Schema of a policy document")
    c = ps.add_parser("check", help="validate a policy and report conflicts")
    c.add_argument("file")
    c.add_argument("--strict", action="store_true", help="warnings fail too (exit 1)")
    t = ps.add_parser("test", help="run a cases file against a policy")
    t.add_argument("file")
    t.add_argument("cases")
    t.add_argument("-v", "--verbose", action="store_true", help="also show why, per case")
    e = ps.add_parser("explain", help="which rule decided a run's call, and why")
    e.add_argument("run")
    e.add_argument("call_id")
    e.add_argument("--timeout", type=float, default=10.0)
    policy_admin.add_parsers(ps)


def cmd_policy(args: argparse.Namespace) -> int:
    """Run `hitl policy ACTION`."""
    if args.policy_command == "schema":
        schema = PolicyDocument.model_json_schema(by_alias=True)
        print(json.dumps(schema, indent=2, ensure_ascii=False))
        return EXIT_OK
    if args.policy_command == "check":
        return _check(args.file, args.strict)
    if args.policy_command == "test":
        return asyncio.run(_test(args.file, args.cases, args.verbose))
    if args.policy_command in ("publish", "apply"):
        return asyncio.run(_admin(args))
    return asyncio.run(_explain(args))


async def _admin(args: argparse.Namespace) -> int:
    from hitl.client import connect

    policy_admin.check_inputs(args)
    client = await connect(profile=args.profile, address=args.address, namespace=args.namespace)
    if args.policy_command == "publish":
        return await policy_admin.publish(client, args)
    return await policy_admin.apply(client, args)


def _check(path: str, strict: bool) -> int:
    doc = load_policy(path)
    findings = check(doc)
    for f in findings:
        print(str(f))
    errors = sum(f.level == "error" for f in findings)
    warnings = len(findings) - errors
    print(
        f"{doc.policy}@{doc.version} {digest_of(doc)[:19]}: {len(doc.rules)} rules, "
        f"{errors} errors, {warnings} warnings"
    )
    return EXIT_FAILED if errors or (strict and warnings) else EXIT_OK


async def _test(path: str, cases_path: str, verbose: bool) -> int:
    doc = load_policy(path)
    results = await run_cases(doc, load_cases(cases_path))
    failed = 0
    for r in results:
        mark = "ok  " if not r.diffs else "FAIL"
        print(f"{mark} {r.name}")
        for d in r.diffs:
            print(f"       {d}")
        if verbose or r.diffs:
            for line in explain_lines(r.verdict):
                print(f"       | {line}")
        failed += bool(r.diffs)
    print(f"{len(results) - failed} passed, {failed} failed ({doc.policy}@{doc.version})")
    return EXIT_CASES_FAILED if failed else EXIT_OK


def explain_lines(v: Verdict) -> list[str]:
    """A verdict, rule by rule, as a person reads it."""
    decided = f"{v.effect} by rule {v.rule}" if v.effect else "no enforced rule: the code decides"
    lines = [f"verdict: {decided}"]
    if v.shadow_effect is not None:
        lines.append(f"log_only rules would make it: {v.shadow_effect} (rule {v.shadow_rule})")
    for rep in v.reports:
        state = "matched" if rep.matched else "no match"
        mode = "" if rep.mode == "enforce" else f", {rep.mode}"
        lines.append(f"rule {rep.rule} ({rep.effect}{mode}): {state}")
        lines += [f"    {w}" for w in rep.why]
    return lines


class _Recorded:
    """A ledger that answers as the run recorded: a limit passed where its rule matched."""

    def __init__(self, doc: PolicyDocument, facts: CallFacts, matched: list[str]) -> None:
        self.passed = set()
        for r in doc.rules:
            if r.limit is not None and r.id in matched:
                with contextlib.suppress(Unknown):
                    self.passed.add(render_key(r.limit.key, facts))

    async def check_and_reserve(self, check: LimitCheck) -> LimitAnswer:
        exceeded = check.key in self.passed
        return LimitAnswer(total_before="?", total_after="(as recorded)", exceeded=exceeded)

    async def release(self, check: LimitCheck, reason: str) -> None:
        """Nothing is reserved."""

    async def commit(self, check: LimitCheck) -> None:
        """Nothing is reserved."""


async def _explain(args: argparse.Namespace) -> int:
    from hitl.client import connect
    from hitl.wire import QUERY_SNAPSHOT, RunSnapshot

    client = await connect(profile=args.profile, address=args.address, namespace=args.namespace)
    handle = await _handle(client, args.run)
    snap: RunSnapshot = await _query(client, handle, QUERY_SNAPSHOT, RunSnapshot, args.timeout)
    pinned = snap.status.policy
    if pinned is None:
        raise Refused("the run pinned no approval policy (its worker had none when it started)")
    recorded = next((v for v in snap.status.verdicts if v.call_id == args.call_id), None)
    call = next(
        (i for i in snap.new_items if i.call_id == args.call_id and i.type == "tool_call_item"),
        None,
    )
    if recorded is None or call is None:
        raise Refused(f"the run's policy has no verdict for call {args.call_id}")
    doc = from_data(pinned.document, source=f"pinned policy {pinned.name}")
    facts = CallFacts(
        agent=call.agent_name,
        tool=str(call.raw_item.get("name", "")),
        arguments=_arguments(str(call.raw_item.get("arguments", ""))),
        categories=recorded.categories,
        at=recorded_at(),
    )
    verdict = await evaluate(doc, pinned.digest, facts, _Recorded(doc, facts, recorded.matched))
    print(f"run {args.run}, call {args.call_id}: {facts.agent} -> {facts.tool}")
    print(f"policy {pinned.name}@{pinned.version} {pinned.digest} (pinned when the run started)")
    print(
        f"recorded: {recorded.effect or 'no enforced rule'} by {recorded.rule or '-'}; "
        f"the call was {recorded.outcome or '-'}"
    )
    for line in explain_lines(verdict):
        print(line)
    return EXIT_OK


def _arguments(text: str) -> Any:
    from decimal import Decimal

    try:
        return json.loads(text, parse_float=Decimal, parse_int=Decimal) if text.strip() else {}
    except ValueError:
        return {}


def recorded_at() -> Any:
    """A time for limit checks (the recorded ledger ignores it)."""
    from datetime import UTC, datetime

    return datetime.now(UTC)
