"""examples/order_tools.py runs as written: function tools, an approver, audit and replay."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from plait.events import SqliteStore
from plait.replay import audit, replay

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "order_tools.py"


def test_the_order_desk_refunds_what_its_approver_lets_through(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = importlib.util.spec_from_file_location("plait_order_tools_example", EXAMPLE)
    assert spec is not None and spec.loader is not None
    example = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = example  # msgspec resolves the module's annotations through it
    spec.loader.exec_module(example)
    session_id = example.main(str(tmp_path / "orders.db"))
    printed = capsys.readouterr().out
    assert "Order 7 is refunded; order 8 needs a person's approval." in printed
    assert example.ORDERS[7].status == "refunded" and example.ORDERS[8].status == "open"
    with SqliteStore(tmp_path / "orders.db") as store:
        rows = audit(store, session_id)
        result = replay(store, session_id, timeout=10, tools=example.TOOLS)
    assert [(r.tool, r.approval, r.outcome) for r in rows] == [
        ("lookup_order", "not required", "ok"),
        ("lookup_order", "not required", "ok"),
        ("refund", "approved", "ok"),
        ("refund", "denied", "refused"),
    ]
    assert result.ok, result.divergence and result.divergence.message()
