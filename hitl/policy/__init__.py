"""Approval policies as data: rules that allow, ask or deny tool calls (docs/policies.md).

The language is pure (no Temporal): `PolicyDocument` (the rules), `load_policy` /
`parse_policy` (YAML or JSON, refused with the line and the reason), `evaluate` (the verdict
for one call) and the `LimitLedger` protocol for limits across runs.
"""

from hitl.policy.document import Condition, Limit, PolicyDocument, Rule
from hitl.policy.evaluate import CallFacts, RuleReport, Verdict, evaluate
from hitl.policy.limits import LimitAnswer, LimitCheck, LimitLedger, LimitLedgerError
from hitl.policy.loading import (
    PolicyError,
    canonical,
    digest_of,
    from_data,
    load_policy,
    parse_policy,
)

__all__ = [
    "CallFacts",
    "Condition",
    "Limit",
    "LimitAnswer",
    "LimitCheck",
    "LimitLedger",
    "LimitLedgerError",
    "PolicyDocument",
    "PolicyError",
    "Rule",
    "RuleReport",
    "Verdict",
    "canonical",
    "digest_of",
    "evaluate",
    "from_data",
    "load_policy",
    "parse_policy",
]
