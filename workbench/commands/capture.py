"""``workbench capture``: a loopback proxy that records your agents' token shape
(docs/capture.md)."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys

from workbench.errors import ListenError

NAME = "capture"
HELP = "record your own agents' token shape through a loopback proxy (docs/capture.md)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    from workbench.capture.proxy import DEFAULT_PARENT_HEADER, DEFAULT_SESSION_HEADER
    from workbench.capture.tokens import TOKENIZERS

    p.add_argument("--upstream", required=True, metavar="URL",
                   help="the server to relay to, e.g. http://127.0.0.1:8000 or "
                        "https://api.anthropic.com")
    p.add_argument("--listen", default="127.0.0.1:0", metavar="HOST:PORT",
                   help="where to listen (default 127.0.0.1:0: a free port on loopback)")
    p.add_argument("-o", "--output", required=True, metavar="DIR",
                   help="directory of the conversation files")
    p.add_argument("--tokenizer", default="upstream", choices=TOKENIZERS,
                   help="where prompt token ids come from: the upstream's POST /tokenize "
                        "(default; the word tokenizer when it has none) or the built-in "
                        "word tokenizer")
    p.add_argument("--session-header", default=DEFAULT_SESSION_HEADER, metavar="NAME",
                   help=f"header naming a request's session (default {DEFAULT_SESSION_HEADER})")
    p.add_argument("--parent-header", default=DEFAULT_PARENT_HEADER, metavar="NAME",
                   help="header naming the parent session of a sub-agent "
                        f"(default {DEFAULT_PARENT_HEADER})")
    p.add_argument("--salt-file", default=None, metavar="FILE",
                   help="save the hashing key there (default: kept in memory only)")


def _listen(value: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) < 65536:
        raise ValueError(f"--listen must be HOST:PORT, got {value!r}")
    return host.strip("[]") or "127.0.0.1", int(port)


def run(args: argparse.Namespace) -> int:
    import asyncio

    from workbench.capture.proxy import CaptureProxy
    from workbench.replay.prepare import run_on_fast_loop

    try:
        if os.path.exists(args.output) and not os.path.isdir(args.output):
            raise ValueError(f"-o {args.output}: exists and is not a folder (the conversation "
                             "files go in a folder)")
        host, port = _listen(args.listen)
        proxy = CaptureProxy(args.upstream, args.output, host=host, port=port,
                             tokenizer=args.tokenizer, session_header=args.session_header,
                             parent_header=args.parent_header, salt_file=args.salt_file)
    except ValueError as exc:
        print(f"workbench capture: error: {exc}", file=sys.stderr)
        return 2

    async def serve() -> None:
        async with proxy:
            print(f"capture proxy on {proxy.url} -> {proxy.upstream_shown}", flush=True)
            print(f"conversation files in {proxy.out_dir.resolve()}", flush=True)
            print("Ctrl-C stops it", flush=True)
            await asyncio.Event().wait()

    try:
        with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C or SIGTERM: the normal end
            run_on_fast_loop(serve())
    except ListenError as exc:  # the flag to change
        print(f"workbench capture: error: --listen {args.listen}: {exc}", file=sys.stderr)
        return 2
    files = len(list(proxy.out_dir.glob(f"{proxy.prefix}*.json")))
    resent = (f" ({proxy.resent} sent upstream once more: a reused connection the upstream "
              "had closed)") if proxy.resent else ""
    print(f"captured {proxy.captured} requests, relayed {proxy.passed} others{resent}; "
          f"{files} conversation files in {proxy.out_dir}", flush=True)
    if proxy.not_recorded:  # requests of the captured APIs among the others
        reasons = ", ".join(f"{why}: {n}" for why, n in proxy.not_recorded.most_common())
        print(f"not recorded ({reasons}): docs/capture.md, \"What is captured\"", flush=True)
    return 0
