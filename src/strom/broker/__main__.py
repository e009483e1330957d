"""Child-process entry of EmbeddedBroker (humans use `strom broker`): run a broker until SIGTERM."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import shutil
import signal
import threading
import time
from pathlib import Path

from strom.broker.broker import Broker, serve


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m strom.broker")
    parser.add_argument("--data-dir", required=True, type=Path)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=9092)
    parser.add_argument("--config", action="append", default=[], help="key=value broker config")
    parser.add_argument("--ready-file", type=Path, help="written with the bound port once listening")
    parser.add_argument("--allow-unauthenticated-network-access", action="store_true")
    parser.add_argument("--temporary", action="store_true",
                        help="the data dir is the parent's temporary dir: remove it if the parent dies")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    config = dict(item.split("=", 1) for item in args.config)
    broker = Broker(args.data_dir, args.host, args.port, config,
                    allow_unauthenticated_network=args.allow_unauthenticated_network_access)

    def ready(b: Broker) -> None:
        if args.ready_file is not None:
            tmp = args.ready_file.with_suffix(".tmp")
            tmp.write_text(json.dumps({"host": b.host, "port": b.port, "listeners": {
                listener.name: f"{listener.host or '127.0.0.1'}:{listener.port}"
                for listener in b.listeners}}))
            tmp.replace(args.ready_file)

    orphaned = _stop_with_parent()
    asyncio.run(serve(broker, ready))
    if args.temporary and orphaned.is_set():  # nobody is left to clean up after us
        shutil.rmtree(args.data_dir, ignore_errors=True)


def _stop_with_parent() -> threading.Event:
    """An embedded broker whose parent died (even by kill -9) shuts down instead of lingering;
    the returned event is set when that happened."""
    parent = os.getppid()
    orphaned = threading.Event()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        orphaned.set()
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()
    return orphaned


if __name__ == "__main__":
    main()
