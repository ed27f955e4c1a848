"""Operations on a library, in the wire format an LLM emits, and the record of a rejected one.

{"option": "add", "experience": "..."}
{"option": "modify", "id": "G3", "experience": "..."}
{"option": "delete", "id": "G3"}
{"option": "merge", "ids": ["G1", "G4"], "experience": "..."}
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter


class _Op(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, frozen=True)

    def to_wire(self) -> dict[str, Any]:
        return self.model_dump(mode="json")

    def describe(self) -> str:
        return json.dumps(self.to_wire(), ensure_ascii=False)


class AddOp(_Op):
    option: Literal["add"] = "add"
    experience: str = Field(description="Text of the new lesson.")


class ModifyOp(_Op):
    option: Literal["modify"] = "modify"
    id: str = Field(description="Id of the experience to rewrite (keeps its id).")
    experience: str = Field(description="Its new text.")


class DeleteOp(_Op):
    option: Literal["delete"] = "delete"
    id: str


class MergeOp(_Op):
    option: Literal["merge"] = "merge"
    ids: tuple[str, ...] = Field(
        description="Two or more ids merged into one new experience; the sources are removed."
    )
    experience: str = Field(description="Text of the merged lesson.")


Operation = Annotated[AddOp | ModifyOp | DeleteOp | MergeOp, Field(discriminator="option")]
OPERATION_ADAPTER: TypeAdapter[Operation] = TypeAdapter(Operation)
OPTIONS = ("add", "modify", "delete", "merge")


class Rejection(BaseModel):
    """An item that was not used, and why (the reason is shown to users and sent back to the LLM)."""

    model_config = ConfigDict(frozen=True)

    reason: str
    item: Any = Field(None, description="The raw item as found in the reply (or the operation), for display.")
    index: int | None = Field(None, description="Position of the item in the reply's list (0-based), if any.")

    def describe(self) -> str:
        where = f"item {self.index + 1}" if self.index is not None else "reply"
        shown = _short(self.item)
        return f"{where}{': ' + shown if shown else ''} -> {self.reason}"


def operation_from_wire(data: dict[str, Any]) -> Operation:
    """Strict: for already-clean data (our own logs). Raw LLM replies go through `parse_operations`."""
    return OPERATION_ADAPTER.validate_python(data)


def _short(item: Any, limit: int = 160) -> str:
    if item is None:
        return ""
    if isinstance(item, BaseModel):
        item = item.model_dump(mode="json")
    try:
        text = json.dumps(item, ensure_ascii=False)
    except (TypeError, ValueError):
        text = repr(item)
    return text if len(text) <= limit else text[: limit - 3] + "..."


__all__ = ["AddOp", "DeleteOp", "MergeOp", "ModifyOp", "OPTIONS", "Operation", "Rejection", "operation_from_wire"]
