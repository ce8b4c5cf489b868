"""The console while Temporal is down, against a real dev server that stops and starts again.

A listing that fails is a passing fault: the inbox keeps the calls its last reading found,
says that Temporal did not answer (with the status code, never the server's words), and reads
again on the next poll; once the server is back the note goes and the calls are read afresh.
Before, the page answered 500 and a browser's tab stopped polling for good.
"""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import urlencode

import httpx
import pytest
from temporalio.client import Client

from hitl import Runner
from hitl.client import data_converter
from hitl.console.app import create_app
from hitl.console.auth import Authenticator, token_digest
from hitl.console.data import ConsoleData
from hitl.worker.devserver import DevServer
from tests.agents import support_agent
from tests.helpers import serving, wait_for

BASE = "http://127.0.0.1:8090"
TOKEN = "ann-token-0123456789"
NOTE = re.compile(r'data-testid="unreadable">([^<]*)')


def row(wid: str, call_id: str) -> str:
    return f'data-call="{call_id}" data-run="{wid}"'


@pytest.mark.timeout(180)
async def test_the_inbox_keeps_its_calls_flagged_while_temporal_is_down(tmp_path: Path) -> None:
    server = DevServer(db_filename=tmp_path / "dev.db", log_file=tmp_path / "server.log")
    server.start()
    try:
        client = await Client.connect(server.address, data_converter=data_converter())
        async with serving(client, support_agent) as tq:
            result = await Runner.run(
                support_agent, "cancel order 71", client=client, task_queue=tq, serve=False
            )
        wid, call_id = result.workflow_id, result.interruptions[0].call_id
        data = ConsoleData({client.namespace: client}, task_queues=[tq])
        auth = Authenticator(mode="tokens", users={"ann": token_digest(TOKEN)})
        transport = httpx.ASGITransport(app=create_app(data, auth))
        async with httpx.AsyncClient(transport=transport, base_url=BASE) as web:
            signed = await web.post("/login", data={"name": "ann", "token": TOKEN})
            assert signed.status_code == 303, signed.text
            inbox = "/?" + urlencode({"q": wid})

            async def listed() -> bool:
                data.forget()
                return row(wid, call_id) in (await web.get(inbox)).text

            await wait_for(listed, what="the paused run's call in the inbox")

            server.stop()
            data.forget()
            page = await web.get(inbox)
            assert page.status_code == 200, page.text[:500]
            assert row(wid, call_id) in page.text, "the last reading's call is still shown"
            [note] = NOTE.findall(page.text)
            assert "Temporal did not answer" in note and "UNAVAILABLE" in note, note
            polled = await web.get("/inbox/rows?" + urlencode({"q": wid, "v": "x"}))
            assert polled.status_code == 200 and NOTE.search(polled.text), polled.text[:500]
            assert row(wid, call_id) in polled.text

            server.start()
            data.forget()

            async def recovered() -> bool:
                data.forget()
                text = (await web.get(inbox)).text
                return row(wid, call_id) in text and not NOTE.search(text)

            await wait_for(recovered, 60, "the note to go once the server is back")
    finally:
        server.stop()
