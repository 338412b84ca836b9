"""Arguments and helpers shared by the workspace commands."""

from __future__ import annotations

import argparse
import json

from memory_service.config.settings import Settings, load_settings
from memory_service.domain.context import RuntimeContext


def add_scope_arguments(parser: argparse.ArgumentParser, *, user_required: bool = True) -> None:
    parser.add_argument("--tenant", default="default", help="tenant id (default: default)")
    parser.add_argument("--user", required=user_required, help="user id")
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")


def settings_from(args: argparse.Namespace) -> Settings:
    overrides = {}
    if getattr(args, "workspace", None):
        overrides["workspace"] = args.workspace
    return load_settings(**overrides)


def context_from(args: argparse.Namespace) -> RuntimeContext:
    return RuntimeContext(args.tenant, args.user)


def print_json(value: object) -> None:
    print(json.dumps(value, ensure_ascii=False, indent=2, default=str))
