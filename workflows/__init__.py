"""Workflow code: the `AgentRun` loop and its pure helpers. Only `temporalio.workflow` APIs."""
