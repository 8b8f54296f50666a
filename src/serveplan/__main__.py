"""``python -m serveplan``."""

from serveplan.cli import main

main()
