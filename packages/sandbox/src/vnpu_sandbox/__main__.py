"""``python -m vnpu_sandbox``: the same as the ``vnpu-sandbox`` command."""

import sys

from vnpu_sandbox import cli

sys.exit(cli.main())
