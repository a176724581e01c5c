"""Mocks for ``resilient-agent lab --agent shop:Shop --mock mocks.py``.

``MOCKS`` replaces the tools with side effects for the lab's calls, as livekit's ``mock_tools``
takes them; ``ARGUMENTS`` says what the lab's scripted LLM calls a tool with.
"""

MOCKS = {"check_order_status": lambda order_id: f"Order {order_id} shipped yesterday."}
ARGUMENTS = {"check_order_status": {"order_id": "A1234"}}
