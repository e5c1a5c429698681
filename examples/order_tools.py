"""A service's own Python functions as the model's tools: an order desk, offline.

Run it (a scripted model server stands in for the model: no network, no key)::

    pip install -e .
    python examples/order_tools.py                 # the log in .plait/orders.db
    plait audit <the session id it prints> --store .plait/orders.db

``lookup_order`` is read-only; ``refund`` is not, so under the ``on-write`` approval policy
each refund waits for ``approve``, which lets through refunds up to 100. Each call is in the
log with its arguments, decision, result and duration; ``plait replay`` feeds the recorded
results and runs neither function (docs/tools.md#function-tools).
"""

from __future__ import annotations

import argparse
import json
from typing import Literal

import msgspec

import plait
from plait.replay import audit
from plait.testing import ScriptedModelServer, ScriptedToolCall, Step


class Order(msgspec.Struct):
    """What the desk knows of an order."""

    id: int
    status: Literal["open", "shipped", "refunded"]
    total: float


ORDERS = {7: Order(7, "shipped", 42.5), 8: Order(8, "open", 250.0)}


@plait.tool(read_only=True)
def lookup_order(order_id: int) -> Order:
    """Look up an order by its id."""
    try:
        return ORDERS[order_id]
    except KeyError:
        raise LookupError(f"there is no order {order_id}") from None


@plait.tool(timeout_sec=10)
async def refund(order_id: int, reason: Literal["damaged", "late", "other"]) -> str:
    """Refund an order in full."""
    order = lookup_order(order_id)
    ORDERS[order_id] = msgspec.structs.replace(order, status="refunded")
    return f"refunded {order.total:.2f} for order {order_id} ({reason})"


TOOLS: list[plait.FunctionTool] = [lookup_order, refund]  # tools of different signatures
"""What the desk offers: ``RuntimeSettings(tools=TOOLS)``."""


def approve(request: plait.ApprovalRequest) -> plait.ApprovalDecision:
    """Let refunds of up to 100 through; a person decides the others."""
    order = ORDERS.get(json.loads(request.arguments).get("order_id"))
    if order is not None and order.total <= 100:
        return plait.ApprovalDecision(approved=True)
    return plait.ApprovalDecision(approved=False, reason="over 100: a person decides")


def script() -> list[Step]:
    """What the scripted model says: look both orders up, refund both, sum up."""

    def calls(name: str, *arguments: dict[str, object]) -> Step:
        return Step(tool_calls=[ScriptedToolCall(name, json.dumps(a)) for a in arguments])

    return [
        calls("lookup_order", {"order_id": 7}, {"order_id": 8}),
        calls("refund", {"order_id": 7, "reason": "damaged"}),
        calls("refund", {"order_id": 8, "reason": "late"}),
        Step(text="Order 7 is refunded; order 8 needs a person's approval."),
    ]


def main(store: str = ".plait/orders.db") -> str:
    """Run the desk's session; print what happened and return the session id."""
    with ScriptedModelServer(script()) as server:
        model = plait.ModelSettings(base_url=server.base_url, api_key="offline", model="desk")
        with plait.Runtime(
            store,
            plait.RuntimeSettings(
                model=model, tools=TOOLS, approval_policy="on-write", approver=approve
            ),
        ) as runtime:
            session = runtime.start_session()
            outcome = session.run("Refund orders 7 and 8: 7 came damaged, 8 late.", timeout=60)
            print(outcome.last_assistant_message)
            for row in audit(runtime.store, session.session_id):
                print(f"  {row.tool}: {row.approval}, {row.outcome}, {row.duration_ms} ms")
            print(f"session {session.session_id}")
            return session.session_id


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", default=".plait/orders.db", help="where the log goes")
    main(parser.parse_args().store)
