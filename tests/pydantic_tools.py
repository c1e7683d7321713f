"""A tool's parameters as Pydantic writes them: a nested model under ``$defs`` named by a
``$ref``, optional fields as unions with null (``anyOf``), defaults, an enum and a literal. What
OpenAI's published function-schema rule does not read, and an agent's tools are full of."""

from __future__ import annotations

from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, Field


class Encoding(StrEnum):
    utf8 = "utf-8"
    latin1 = "latin-1"


class LineRange(BaseModel):
    start: int = Field(description="First line to read, counting from one at the top of file.")
    end: int | None = Field(None, description="Last line to read; the end of the file if unset.")


class ReadFile(BaseModel):
    path: str = Field(description="The path of the file, relative to the repository's root.")
    ranges: list[LineRange] = Field(default_factory=list, description="Which lines to read.")
    encoding: Encoding = Encoding.utf8
    mode: Literal["text", "bytes"] | None = None


def read_file_schema() -> dict[str, Any]:
    return ReadFile.model_json_schema()
