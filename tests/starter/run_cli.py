"""`python tests/starter/run_cli.py ARGS`: the starter CLI with the test stand-ins installed."""

import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

import standins  # noqa: E402

standins.install()

from spade_jax.starter.__main__ import main  # noqa: E402

if __name__ == "__main__":
  sys.exit(main())
