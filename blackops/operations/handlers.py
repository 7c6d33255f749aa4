"""Operation handlers: registration, typed params/outcomes (pydantic), calling sync or async."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import inspect
import sys
import typing
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from blackops.failures import OutcomeInvalid, is_validation_error, summarise_validation
from blackops.operations.contexts import CURRENT_CONTEXT
from domain.documents import MAX_SAFE_INTEGER, DocumentError, canonical_document, sha256_digest
from domain.operation_types import check_operation_type
from domain.retention import Retention
from domain.supervision import OperationRejected, Supervision

if TYPE_CHECKING:
    from pydantic import BaseModel

Handler = Callable[..., Any]


def _base_model() -> type[BaseModel] | None:
    """pydantic's BaseModel, looked up, never imported: a model (declared or returned)
    exists only once its code imported pydantic, so a worker of an app without models
    never loads it (~7 MB in every process)."""
    module = sys.modules.get("pydantic")
    found: type[BaseModel] | None = getattr(module, "BaseModel", None)
    return found


@dataclass(frozen=True, slots=True)
class Outcome:
    """A handler's result as a document, with the type name and schema version (OL-9)."""

    document: dict[str, Any] | None
    type_name: str | None
    schema_version: int
    canonical: bytes | None

    @property
    def digest(self) -> str | None:
        if self.canonical is None:
            return None
        return sha256_digest(self.canonical)


@dataclass(frozen=True, slots=True)
class HandlerSpec:
    """One registered operation type."""

    operation_type: str
    fn: Handler
    supervision: Supervision
    params_model: type[BaseModel] | None
    outcome_model: type[BaseModel] | None
    retention: Retention | None = None

    @classmethod
    def build(
        cls,
        type_name: str,
        fn: Handler,
        supervision: Supervision | None,
        retention: Retention | None = None,
    ) -> HandlerSpec:
        check_operation_type(type_name)
        if not callable(fn):
            raise TypeError("an operation handler must be callable")
        if supervision is not None and not isinstance(supervision, Supervision):
            raise TypeError("supervision must be a blackops.Supervision")
        params_model, outcome_model = _models_of(fn)
        if retention is not None and not isinstance(retention, Retention):
            raise TypeError("retention must be a blackops.Retention")
        return cls(
            type_name, fn, supervision or Supervision(), params_model, outcome_model, retention
        )

    def parse_params(self, params: dict[str, Any]) -> Any:
        """The handler's input: the document itself, or the declared pydantic model.

        Raises OperationRejected("validation", "invalid_params") when the document
        does not satisfy the model: a business validation, recorded as Rejected.
        """
        if self.params_model is None:
            return params
        try:
            return self.params_model.model_validate(params, strict=False)
        except Exception as error:
            if not is_validation_error(error):
                raise
            raise OperationRejected(
                "validation", "invalid_params", summarise_validation(error)
            ) from None

    def call(self, ctx: Any, params: Any) -> Any:
        """Run the handler once, sync or async, from synchronous code."""
        token = CURRENT_CONTEXT.set(ctx)
        try:
            result = self.fn(ctx, params)
            if inspect.isawaitable(result):
                return _await(result)
            return result
        finally:
            CURRENT_CONTEXT.reset(token)

    def outcome_of(self, value: Any) -> Outcome:
        """Turn a handler's return value into a canonical outcome, or raise OutcomeInvalid."""
        model = self.outcome_model
        base = _base_model()
        if base is not None and isinstance(value, base):
            if model is not None and not isinstance(value, model):
                raise OutcomeInvalid(
                    f"handler returned {type(value).__name__}, declared {model.__name__}"
                )
            model = type(value)
            document = value.model_dump(mode="json")
        elif value is None:
            return Outcome(None, None, 1, None)
        elif model is not None and type(value) is dict:
            try:
                document = model.model_validate(value).model_dump(mode="json")
            except Exception as error:
                if not is_validation_error(error):
                    raise
                raise OutcomeInvalid(
                    f"outcome does not match {model.__name__}: {summarise_validation(error)}"
                ) from None
        else:
            document = value
        try:
            canonical = canonical_document(document)
        except DocumentError as error:
            raise OutcomeInvalid(f"outcome is not a document: {error.message}") from None
        type_name = f"{model.__module__}.{model.__qualname__}" if model else None
        version = getattr(model, "schema_version", 1) if model else 1
        if type(version) is not int or not 1 <= version <= MAX_SAFE_INTEGER:
            raise OutcomeInvalid(
                f"{type_name}.schema_version must be an integer from 1 to 2**53 - 1"
            )
        return Outcome(document, type_name, version, canonical)


def _models_of(fn: Handler) -> tuple[type[BaseModel] | None, type[BaseModel] | None]:
    """Pydantic models named by the handler's annotations: ``(ctx, params: In) -> Out``."""
    try:
        hints = typing.get_type_hints(fn)
    except Exception:  # unresolvable annotations: treat the handler as untyped
        hints = {}
    parameters = list(inspect.signature(fn).parameters.values())
    if len(parameters) < 2:
        raise TypeError("an operation handler takes (ctx, params)")
    params_hint = hints.get(parameters[1].name)
    outcome_hint = hints.get("return")
    return _model_or_none(params_hint), _model_or_none(outcome_hint)


def _model_or_none(hint: Any) -> type[BaseModel] | None:
    base = _base_model()
    if base is not None and isinstance(hint, type) and issubclass(hint, base):
        return hint
    return None


def _await(awaitable: Any) -> Any:
    """Drive a coroutine to completion from sync code, even inside a running loop."""

    async def wrap() -> Any:
        return await awaitable

    coroutine: Coroutine[Any, Any, Any] = wrap()
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coroutine)
    # A loop is running in this thread: run the coroutine on a private one.
    # contextvars do not follow a thread by themselves: run it in a copy of ours.
    context = contextvars.copy_context()
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(context.run, asyncio.run, coroutine).result()
