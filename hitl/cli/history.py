"""Reading runs' histories for `hitl verify`, and proving them: the two entry points.

A run's history is the only source (what is read from it: `hitl.cli.verify_read`). This module
reads a root run, its continue-as-new chain and its nested runs (agent tools, child workflows
`<parent>--<call id>`, whose calls are decided on the root under qualified ids) into a `Tree`,
and proves it: `hitl.cli.verify_prove` walks the tree's facts in history order, replaying the
run's naming of calls (`t<turn>.<n>`, `hitl.cli.verify_calls`) and feeding each call's candidate
decisions to its `hitl.cli.proof.CallProof`; what ran is judged by `hitl.cli.verify_executed`,
into the `Report` of `hitl.cli.verify_report`. What the run says it decided (its
`DecisionRecord`s, the decisions in `ExecuteToolInput`, its carried decisions) is not read.

`load_tree` does the I/O (through a `fetch` function, so recorded histories can be verified
offline); `prove_tree` is pure.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from temporalio.client import WorkflowHistory
from temporalio.converter import DataConverter

from hitl.cli.verify_prove import Prover
from hitl.cli.verify_read import Chain, Tree, read_run
from hitl.cli.verify_report import Report as Report  # also here, where callers find it
from hitl.wire import ApproverDirectory

Fetch = Callable[[str, str | None], Awaitable[tuple[str, WorkflowHistory]]]
"""`(workflow id, run id or None for the latest) -> (run id, history)`."""


# ----------------------------------------------------------------------------- loading


async def load_chain(
    fetch: Fetch,
    workflow_id: str,
    run_id: str | None,
    converter: DataConverter,
    *,
    back: bool = True,
) -> Chain:
    """Read a workflow id's continue-as-new chain through `run_id` (the latest: `None`).

    Back to its first run (`back`), and on to its last.
    """
    rid, hist = await fetch(workflow_id, run_id)
    runs = [await read_run(workflow_id, rid, hist, converter)]
    seen = {rid}
    while back and runs[0].previous_run and runs[0].previous_run not in seen:
        seen.add(runs[0].previous_run)
        try:
            prid, phist = await fetch(workflow_id, runs[0].previous_run)
        except LookupError:
            break
        runs.insert(0, await read_run(workflow_id, prid, phist, converter))
    while runs[-1].next_run and runs[-1].next_run not in seen:
        seen.add(runs[-1].next_run)
        try:
            nrid, nhist = await fetch(workflow_id, runs[-1].next_run)
        except LookupError:
            break
        runs.append(await read_run(workflow_id, nrid, nhist, converter))
    first = runs[0].start
    return Chain(workflow_id, runs, missing_start=first is not None and first.carried is not None)


async def load_tree(
    fetch: Fetch, workflow_id: str, converter: DataConverter, run_id: str | None = None
) -> Tree:
    """Read a root run's chain and, recursively, its nested runs' chains."""
    root = await load_chain(fetch, workflow_id, run_id, converter)
    tree = Tree(root=root, chains=[root])
    todo = [root]
    while todo:
        chain = todo.pop()
        for run in chain.runs:
            for child_id, child_run in run.children:
                try:
                    child = await load_chain(fetch, child_id, child_run, converter, back=False)
                except LookupError:
                    tree.notes.append(f"nested run {child_id} could not be read")
                    continue
                child.parent = chain
                tree.chains.append(child)
                todo.append(child)
    return tree


# ----------------------------------------------------------------------------- proving


def prove_tree(tree: Tree, keys: ApproverDirectory | None = None) -> Report:
    """Prove every executed call of a tree (pure: the histories are read already).

    `keys`: check signatures against this directory instead of the pinned one (its pinned
    keys missing from it are reported).
    """
    prover = Prover(tree, keys)
    report = prover.run()
    if keys is not None and prover.root is not None and prover.root.directory:
        report.pinned_keys_missing += _missing_keys(prover.root.directory, keys)
    return report


def _missing_keys(pinned: ApproverDirectory, keys: ApproverDirectory) -> list[str]:
    """The pinned directory's keys the operator's directory lacks (`name: key id`)."""
    ours = {k for e in keys.approvers.values() for k in e.keys}
    return [
        f"{name}: {key_id}"
        for name, entry in pinned.approvers.items()
        for key_id in entry.keys
        if key_id not in ours
    ]
