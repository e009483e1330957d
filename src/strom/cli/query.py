"""`strom streams query APP STORE KEY`: a key's value in a running application's store, over the HTTP
face its driver serves (`strom run --query-port`, or `query.http.port` in its configs).

The driver writes its URL to `<state.dir>/<APP>/query.url`; `--url` names it when the driver runs
elsewhere. Prints the answer as JSON; exits 1 when no partition holds the key, 2 when the store
could not answer now (a rebalance or a lost executor: retry) or the request is wrong.
"""

from __future__ import annotations

import json
import sys
import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import quote, urlencode

import click

from strom.errors import ConfigError
from strom.streams.config import DEFINITIONS, STATE_DIR

QUERY_PORT_CONFIG = "query.http.port"
"""The StreamsConfig key `strom run --query-port` sets (strom.spark.queries.http)."""
_TIMEOUT_S = 30.0


def query_port_option(function):  # type: ignore[no-untyped-def]
    """`strom run`'s --query-port."""
    return click.option("--query-port", type=click.IntRange(0, 65535), default=None,
                        help="Serve interactive queries over HTTP on this port (0: a free one): GET "
                             "/stores/<store>/keys/<key> and more (docs/runtime.md#interactive-queries); "
                             f"the config {QUERY_PORT_CONFIG}.")(function)


@click.command()
@click.argument("app_id")
@click.argument("store")
@click.argument("key")
@click.option("--url", default=None, metavar="URL",
              help="The driver's query URL (default: read from <state-dir>/<APP_ID>/query.url).")
@click.option("--state-dir", type=click.Path(file_okay=False, path_type=Path),
              default=Path(DEFINITIONS[STATE_DIR][0]), show_default=True, help="The application's state.dir.")
@click.option("--stale", is_flag=True, help="Let a standby answer (possibly older) when the active cannot.")
@click.option("--as-of", type=int, default=None, metavar="MS", help="A versioned store's value at this time.")
def query(app_id: str, store: str, key: str, url: str | None, state_dir: Path, stale: bool,
          as_of: int | None) -> None:
    """Print KEY's value in STORE of the running application APP_ID (JSON)."""
    base = url or _url_of(state_dir, app_id)
    params = {**({"stale": "true"} if stale else {}), **({"as_of": str(as_of)} if as_of is not None else {})}
    target = f"{base.rstrip('/')}/stores/{quote(store, safe='')}/keys/{quote(key, safe='')}"
    status, body = _get(target + (f"?{urlencode(params)}" if params else ""))
    click.echo(json.dumps(body, indent=2))
    if status == 404 and "value" in body:
        sys.exit(1)
    if status != 200:
        click.echo(f"Error: {body.get('error', status)}" + (" (retry)" if body.get("retriable") else ""),
                   err=True)
        sys.exit(2)


def _url_of(state_dir: Path, app_id: str) -> str:
    path = state_dir / app_id / "query.url"
    if not path.is_file():
        raise ConfigError(f"No query URL at {path}: is {app_id} running with --query-port (query.http.port), "
                          "with this --state-dir? Or pass --url http://HOST:PORT.")
    return path.read_text().strip()


def _get(url: str) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(url, timeout=_TIMEOUT_S) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"{}")
    except urllib.error.URLError as error:
        raise ConfigError(f"Cannot reach the application's query endpoint {url}: {error.reason}. Is it "
                          "running?") from None
