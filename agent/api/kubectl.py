"""``kubectl-dispatch``: the API's command line as a kubectl plugin, so ``kubectl dispatch status …`` works.

kubectl runs an executable named ``kubectl-dispatch`` found on ``PATH`` for ``kubectl dispatch``, passing it every
argument after the plugin's name (``-n``, ``--context`` and ``--kubeconfig`` included, which the verbs read as
kubectl does). The verbs, flags and exit status are ``agent.api.cli``'s; only the program's name differs.
Both distributions install it: ``dispatch-k8s`` and the command-line client's own, ``dispatch-k8s-cli``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Final

from agent.api import cli
from serving.flags import add_version

PROG: Final = "kubectl dispatch"


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(
        prog=PROG,
        description="call the dispatch agent's API (the kubectl plugin kubectl-dispatch)",
        epilog=cli.epilog(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_version(top)
    cli.add_verbs(top.add_subparsers(dest="command", required=True, metavar="VERB"))
    return top


def main(argv: Sequence[str] | None = None) -> int:
    return cli.run_command(parser().parse_args(argv), PROG)


if __name__ == "__main__":
    sys.exit(main())
