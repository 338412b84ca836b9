"""A route's answer serialised where the route runs.

A plain-function route returning a model has FastAPI validate it again against the route's
``response_model`` in the thread pool (one more hop per request) and serialise it after; a
route answering the model's JSON itself skips both, and its ``response_model`` still documents
the answer. The answer is the same: the model's fields by alias, as FastAPI would dump them.
"""

from __future__ import annotations

from fastapi.responses import Response
from pydantic import BaseModel

JSON = "application/json"


def json_answer(model: BaseModel, status_code: int = 200) -> Response:
    """``model`` as the JSON body of a ``status_code`` answer."""
    return Response(model.model_dump_json(by_alias=True), status_code, media_type=JSON)
