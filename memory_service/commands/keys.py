"""``memory-service keys add | list | revoke | migrate``: the API keys, without an editor.

They change the keys ``serve`` reads: the file (``MEMORY_API_KEYS_FILE``, else
``<workspace>/api-keys.json``), or, with replica state in PostgreSQL
(``MEMORY_STATE__BACKEND``, the same settings as ``serve``), the ``api_keys`` table every
replica follows. A running server picks the change up within a second or two
(``MEMORY_STATE__KEYS_REFRESH_S`` with PostgreSQL). A new key is printed once, alone on
stdout; only its SHA-256 digest is stored. With PostgreSQL, ``migrate`` imports the keys file
once, so a deployment moving to replicas keeps its keys.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from memory_service.commands.common import print_json, settings_from
from memory_service.domain.errors import BackendUnavailableError, ConfigurationError
from memory_service.stores.api_keys import ROLE_ALIASES, ROLES

if TYPE_CHECKING:  # imported when a command runs: the CLI starts without psycopg
    from memory_service.stores.api_keys import KeyStore

WORKSPACE_HELP = (
    "workspace whose api-keys.json to use (with PostgreSQL state only migrate reads it; "
    "default: MEMORY_WORKSPACE or ./data)"
)


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "keys",
        help="add, list or revoke API keys",
        description="Manage the API keys serve reads (the keys file, or PostgreSQL with "
        "MEMORY_STATE__BACKEND=postgres); a running serve picks up changes.",
    )
    actions = parser.add_subparsers(dest="keys_command", required=True, metavar="ACTION")

    add = actions.add_parser("add", help="mint a key for a tenant (printed once)")
    add.add_argument("--tenant", required=True, help="the tenant the key acts for")
    add.add_argument(
        "--user",
        help="bind the key to this one user of the tenant (a personal key: an MCP client on "
        "a desktop, a browser extension): it reads and writes that user's memory only",
    )
    add.add_argument(
        "--role",
        choices=(*ROLES, *ROLE_ALIASES),
        default=None,
        help="application (every user of the tenant; 'user' is its older name); curator "
        "(also writes agent and tenant memory); admin; personal (with --user). Default: "
        "personal with --user, else application",
    )
    add.set_defaults(handler=run_add)

    listing = actions.add_parser("list", help="tenant, role, fingerprint, created_at per key")
    listing.add_argument("--json", action="store_true", help="print JSON instead of text")
    listing.set_defaults(handler=run_list)

    revoke = actions.add_parser("revoke", help="remove a key, by its fingerprint or itself")
    revoke.add_argument("key", help="a fingerprint (from `keys list`) or the key")
    revoke.set_defaults(handler=run_revoke)

    migrate = actions.add_parser(
        "migrate",
        help="keys file: store its plaintext keys as digests; with PostgreSQL state: import "
        "the keys file into PostgreSQL once, so replicas keep the keys",
        description="With the keys in a file: store its plaintext keys as SHA-256 digests. "
        "With MEMORY_STATE__BACKEND=postgres: import the keys file (MEMORY_API_KEYS_FILE, "
        "else <workspace>/api-keys.json) into PostgreSQL, every key as its digest, so a "
        "deployment moving to replicas keeps its keys; keys already there (revoked ones "
        "too) are left as they are, so running it again changes nothing.",
    )
    migrate.set_defaults(handler=run_migrate)

    for action in (add, listing, revoke, migrate):
        action.add_argument("--workspace", help=WORKSPACE_HELP)


@contextmanager
def _store(args: argparse.Namespace) -> Iterator[KeyStore]:
    """The keys of the settings ``serve`` would use; PostgreSQL that cannot be reached is an
    error naming MEMORY_POSTGRES__DSN."""
    from memory_service.stores.build import api_keys, open_database
    from memory_service.stores.database import DSN_SETTING

    settings = settings_from(args)
    database = open_database(settings)  # None: the keys file
    try:
        yield api_keys(settings, database)
    except BackendUnavailableError as exc:
        raise ConfigurationError(f"{DSN_SETTING}: {exc.message}") from exc
    finally:
        if database is not None:
            database.close()


def run_add(args: argparse.Namespace) -> int:
    from memory_service.stores.api_keys import role_of

    role = role_of(args.role or ("personal" if args.user is not None else "application"))
    with _store(args) as store:
        key = store.add(args.tenant, role, user=args.user)
    print(key, flush=True)
    bound = f" bound to user {args.user!r}" if args.user is not None else ""
    article = "an" if role[0] in "aeiou" else "a"
    print(
        f"added {article} {role} key for tenant {args.tenant!r}{bound} to {store.where}; it is "
        "shown only now (only its digest is stored)",
        file=sys.stderr,
    )
    return 0


def run_list(args: argparse.Namespace) -> int:
    with _store(args) as store:
        entries = store.entries()
    from memory_service.stores.api_keys.files import FilesKeyStore

    if isinstance(store, FilesKeyStore) and not store.path.exists():
        print(
            f"no keys file at {store.path} yet: `keys add` or `serve` creates it", file=sys.stderr
        )
    rows = [
        {
            "fingerprint": e.fingerprint,
            "tenant": e.tenant,
            "role": e.role,
            "user": e.user,
            "created_at": e.created_at,
            "stored": "plaintext" if e.plaintext else "sha256",
        }
        for e in entries
    ]
    if args.json:
        print_json(rows)
        return 0
    print(f"{'FINGERPRINT':<14}{'TENANT':<20}{'ROLE':<13}{'USER':<20}{'CREATED_AT':<34}STORED")
    for row in rows:
        print(
            f"{row['fingerprint']:<14}{row['tenant']:<20}{row['role']:<13}"
            f"{row['user'] or '-':<20}{row['created_at'] or '-':<34}{row['stored']}"
        )
    return 0


def run_revoke(args: argparse.Namespace) -> int:
    with _store(args) as store:
        entry = store.revoke(args.key)
    print(f"revoked key {entry.fingerprint} ({entry.role}) of tenant {entry.tenant!r}")
    return 0


def run_migrate(args: argparse.Namespace) -> int:
    with _store(args) as store:
        converted = store.migrate()
    from memory_service.stores.api_keys.postgres import PostgresKeyStore

    if not isinstance(store, PostgresKeyStore):
        print(f"{converted} plaintext keys of {store.where} now stored as SHA-256 digests")
        return 0
    print(
        f"imported {converted} new keys of {store.keys_file} into {store.where}, as SHA-256 "
        "digests; serve reads the keys from there only: the file can be deleted"
    )
    return 0
