"""The web planner (``serveplan ui``): a local page over the same library calls as the CLI."""
