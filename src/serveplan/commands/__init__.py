"""The commands as library calls: per command one options value (:mod:`~serveplan.commands.options`),
one ``prepare`` that checks it before any work, and one ``run`` that answers it. The CLI
(:mod:`serveplan.cli`) and the web page (:mod:`serveplan.ui`) are front ends over these: they parse
into the options value, call ``run`` and render the result, so the same question gets the same
answer whichever door it came in by.

* :mod:`~serveplan.commands.plan` - ``serveplan optimize``, the page's Plan panel, ``plan_serving``;
* :mod:`~serveplan.commands.sweep` - ``serveplan sweep``: a grid of plan questions, one summary;
* :mod:`~serveplan.commands.simulate` - ``serveplan simulate``, the Simulate panel;
* :mod:`~serveplan.commands.estimate` - ``serveplan estimate``, the Step panel;
* :mod:`~serveplan.commands.offload` - ``serveplan offload``, the Offload panels.
"""
