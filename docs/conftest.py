"""pytest collection for docs/: only the Markdown pages are doctested.

``conf.py`` and the Sphinx extension in ``_ext`` are build configuration, not tests, and the
build output in ``_build`` holds copies of the pages.
"""

collect_ignore = ["conf.py"]
collect_ignore_glob = ["_ext/*", "_build/*", "api/generated/*", "results/*"]
