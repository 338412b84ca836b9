"""``memory-service keys add | list | revoke | migrate``: the API keys file, without an editor.

They change the file ``serve`` reads (``MEMORY_API_KEYS_FILE``, else
``<workspace>/api-keys.json``); a running server picks the change up within a second or two.
A new key is printed once, alone on stdout; the file keeps only its SHA-256 digest.
"""

from __future__ import annotations

import argparse
import sys

from memory_service.commands.common import print_json, settings_from

WORKSPACE_HELP = "workspace whose api-keys.json to use (default: MEMORY_WORKSPACE or ./data)"


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "keys",
        help="add, list or revoke API keys",
        description="Manage the API keys file serve reads; a running serve picks up changes.",
    )
    actions = parser.add_subparsers(dest="keys_command", required=True, metavar="ACTION")

    add = actions.add_parser("add", help="mint a key for a tenant (printed once)")
    add.add_argument("--tenant", required=True, help="the tenant the key acts for")
    add.add_argument(
        "--role",
        choices=("user", "curator", "admin"),
        default="user",
        help="user; curator (also writes agent and tenant memory); admin. Default: user",
    )
    add.set_defaults(handler=run_add)

    listing = actions.add_parser("list", help="tenant, role, fingerprint, created_at per key")
    listing.add_argument("--json", action="store_true", help="print JSON instead of text")
    listing.set_defaults(handler=run_list)

    revoke = actions.add_parser("revoke", help="remove a key, by its fingerprint or itself")
    revoke.add_argument("key", help="a fingerprint (from `keys list`) or the key")
    revoke.set_defaults(handler=run_revoke)

    migrate = actions.add_parser("migrate", help="store plaintext keys of the file as digests")
    migrate.set_defaults(handler=run_migrate)

    for action in (add, listing, revoke, migrate):
        action.add_argument("--workspace", help=WORKSPACE_HELP)


def _store(args: argparse.Namespace):
    from memory_service.api.key_store import KeyStore
    from memory_service.api.keys import keys_file

    return KeyStore(keys_file(settings_from(args)))


def run_add(args: argparse.Namespace) -> int:
    store = _store(args)
    key = store.add(args.tenant, args.role)
    print(key, flush=True)
    print(
        f"added a {args.role} key for tenant {args.tenant!r} to {store.path}; it is shown only "
        "now (the file keeps its digest)",
        file=sys.stderr,
    )
    return 0


def run_list(args: argparse.Namespace) -> int:
    store = _store(args)
    entries = store.entries()
    if not store.path.exists():
        print(
            f"no keys file at {store.path} yet: `keys add` or `serve` creates it", file=sys.stderr
        )
    rows = [
        {
            "fingerprint": e.fingerprint,
            "tenant": e.tenant,
            "role": e.role,
            "created_at": e.created_at,
            "stored": "plaintext" if e.plaintext else "sha256",
        }
        for e in entries
    ]
    if args.json:
        print_json(rows)
        return 0
    print(f"{'FINGERPRINT':<14}{'TENANT':<20}{'ROLE':<9}{'CREATED_AT':<34}STORED")
    for row in rows:
        print(
            f"{row['fingerprint']:<14}{row['tenant']:<20}{row['role']:<9}"
            f"{row['created_at'] or '-':<34}{row['stored']}"
        )
    return 0


def run_revoke(args: argparse.Namespace) -> int:
    entry = _store(args).revoke(args.key)
    print(f"revoked key {entry.fingerprint} ({entry.role}) of tenant {entry.tenant!r}")
    return 0


def run_migrate(args: argparse.Namespace) -> int:
    store = _store(args)
    converted = store.migrate()
    print(f"{converted} plaintext keys of {store.path} now stored as SHA-256 digests")
    return 0
