"""The base of every settings section: an unknown key is an error, not silently ignored; and
``setting_error``, for a check across fields that still names the one variable at fault."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict
from pydantic_core import PydanticCustomError

SETTING_KEY = "setting"  # where ``setting_error`` keeps the field, in the error's context


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


def setting_error(field: str | tuple[str, ...], message: str) -> PydanticCustomError:
    """An error of a model validator that names ``field`` (below the model it checks, e.g.
    ``retrieval_preset`` of ``longterm``): ``load_settings`` then says
    ``MEMORY_LONGTERM__RETRIEVAL_PRESET``, not the section's ``MEMORY_LONGTERM``."""
    path = (field,) if isinstance(field, str) else field
    return PydanticCustomError(
        "invalid_setting", "{message}", {"message": message, SETTING_KEY: path}
    )
