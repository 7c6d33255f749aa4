"""A small shop: typed operations with rejections and retries, and a durable
order-approval workflow.

Run it with ``make run`` (HTTP) or from the shell::

    blackops op run invoice.issue --app examples.shop:app \\
        --params '{"customer": "ana", "amount": 42}'
    blackops wf create OrderApproval --app examples.shop:app \\
        --params '{"order": "A-1", "amount": 42}'
"""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import BaseModel, Field

from blackops import (
    Application,
    ExecutionContext,
    OperationRejected,
    Retryable,
    RetryPolicy,
    Supervision,
    WorkflowEvent,
)

app = Application()


class InvoiceRequest(BaseModel):
    customer: str = Field(min_length=1, max_length=100)
    amount: int
    currency: str = "EUR"


class Invoice(BaseModel):
    schema_version: ClassVar[int] = 1

    invoice_id: str
    customer: str
    amount: int
    currency: str
    issued_by: str


@app.operation("invoice.issue")
def issue_invoice(ctx: ExecutionContext, params: InvoiceRequest) -> Invoice:
    """Business validation is a rejection (OL-6), not an error."""
    if params.amount <= 0:
        raise OperationRejected("validation", "amount_not_positive", "amount must be > 0")
    if params.customer == "blocked":
        raise OperationRejected("business_rule", "customer_blocked", "customer is blocked")
    return Invoice(
        invoice_id="INV-" + ctx.operation_id[-12:],
        customer=params.customer,
        amount=params.amount,
        currency=params.currency,
        issued_by=ctx.actor.id,
    )


_flaky_calls: dict[str, int] = {}


@app.operation(
    "inventory.reserve",
    supervision=Supervision(max_attempts=3, backoff="exponential", initial_delay_seconds=0.05),
)
async def reserve_stock(ctx: ExecutionContext, params: dict[str, object]) -> dict[str, object]:
    """Async handler whose first attempt per operation hits a retryable failure."""
    seen = _flaky_calls.get(ctx.operation_id, 0)
    _flaky_calls[ctx.operation_id] = seen + 1
    if seen == 0:
        raise Retryable("warehouse did not answer in time")
    return {"sku": params.get("sku", "unknown"), "reserved": True, "attempt": ctx.attempt}


@app.operation("greeting.say")
def say_hello(ctx: ExecutionContext, params: dict[str, object]) -> dict[str, object]:
    return {"greeting": f"hello, {params.get('name', 'world')}", "tenant": ctx.tenant}


class OrderApproval:
    """An order waits for a manager's decision (docs/getting-started.md walks through it).

    params: ``{"order": str, "amount": int, "cool_off_seconds"?: int}``. The instance
    prices the order, sleeps through a cooling-off period (default 5 s), then waits up
    to an hour for an ``approval`` event ``{"approved": bool, "by": str}``; approved
    orders are charged. Missing params make the run throw: status ``errored``.
    """

    def __init__(self, env: Any) -> None:
        self.env = env

    async def run(self, event: WorkflowEvent, step: Any) -> dict[str, Any]:
        params = event.params or {}
        order, amount = params["order"], params["amount"]
        quote = await step.do("price the order", lambda: {"total": amount, "currency": "EUR"})
        await step.sleep("cooling-off period", params.get("cool_off_seconds", 5))
        decision = await step.wait_for_event(
            "manager decision", type="approval", timeout_seconds=3600
        )
        if decision is None or decision.get("approved") is not True:
            by = decision.get("by") if decision else None
            return {"order": order, "approved": False, "by": by}
        receipt = await step.do(
            "charge the customer",
            lambda: {"charged": quote["total"], "currency": quote["currency"]},
            retry_policy=RetryPolicy(
                max_attempts=3, backoff="exponential", initial_delay_seconds=1
            ),
        )
        return {"order": order, "approved": True, "by": decision.get("by"), **receipt}


app.register_workflow(OrderApproval)
