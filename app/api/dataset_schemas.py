"""Request schemas of private exemplar sets (``POST /v1/datasets``), shared by the route, the OpenAPI document
(app/api/openapi.py) and the sample loader: below every route module, so none imports another."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import ConfigDict, Field, field_validator, model_validator

from app.api.schemas import AdjacencyName
from app.badtext import visible_form
from app.jsonbody import JSONBody, VisibleText

__all__ = ["BudgetIn", "DatasetCreate", "DatasetMeta", "ExemplarIn", "NON_BLANK", "TemplateIn"]

# A label is not blank (same pattern as the chat route's non-blank text; see there).
NON_BLANK = r"[^\s\x1c-\x1f]"

class TemplateIn(JSONBody):
    model_config = ConfigDict(extra="forbid")
    instruction: str | None = Field(default=None, max_length=2000)
    input_prefix: str | None = Field(default=None, max_length=200)
    output_prefix: str | None = Field(default=None, max_length=200)


class ExemplarIn(JSONBody):
    model_config = ConfigDict(extra="forbid")
    # Not blank (the route refuses a blank input, 422 exemplars.<i>.input, code empty_input).
    input: str = Field(json_schema_extra={"pattern": NON_BLANK})
    output: str


class BudgetIn(JSONBody):
    model_config = ConfigDict(extra="forbid")
    epsilon: float = Field(gt=0, allow_inf_nan=False, description="total epsilon for every answer on this set")
    delta: float = Field(gt=0, lt=1, allow_inf_nan=False)
    adjacency: AdjacencyName | None = None


class DatasetMeta(JSONBody):
    # labels: required (a list) unless task is "generation", as _task_labels checks.
    model_config = ConfigDict(extra="forbid", json_schema_extra={
        "if": {"required": ["task"], "properties": {"task": {"const": "generation"}}},
        "then": {},
        "else": {"required": ["labels"], "properties": {"labels": {"type": "array"}}},
    })
    name: Annotated[VisibleText, Field(min_length=1, max_length=200)]
    budget: BudgetIn | None = None
    task: Literal["classification", "generation"] = "classification"
    # Unique (uniqueItems in the schema); the check below also refuses two labels equal once trimmed.
    labels: Annotated[list[VisibleText], Field(
        min_length=2, max_length=100, json_schema_extra={"uniqueItems": True})] | None = None
    template: TemplateIn | None = None
    answer_reuse: bool = Field(default=True, description="an identical private request gets the stored released "
                                                         "answer at no cost (false: every request is charged)")

    @field_validator("labels")
    @classmethod
    def _labels(cls, v: list[str] | None) -> list[str] | None:
        if v is None:
            return v
        if len(v) < 2:
            raise ValueError("a classification set needs at least 2 labels")
        cleaned = [s.strip() for s in v]
        if any(not s for s in cleaned):
            raise ValueError("labels must be non-empty strings")
        # Unique as text, not as code points: "caf\u00e9" and "cafe\u0301" are one word in two Unicode forms, "yes"
        # and "yes\u200b" one word with a zero-width space (they render alike, and would split one class's votes).
        if len({visible_form(s) for s in cleaned}) != len(cleaned):
            raise ValueError("labels must be unique (compared trimmed, without format characters, in Unicode NFC)")
        return cleaned

    @model_validator(mode="after")
    def _task_labels(self) -> "DatasetMeta":
        if self.task == "classification" and not self.labels:
            raise ValueError("labels: required for task 'classification'")
        return self


class DatasetCreate(DatasetMeta):
    exemplars: list[ExemplarIn] = Field(min_length=1)


