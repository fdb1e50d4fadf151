"""Sphinx configuration: the documentation in doc/ as one HTML site
(``tox -e docs``; tests/unit/test_docs.py builds it with warnings as errors)."""

project = "sharemgr"
copyright = "sharemgr authors"
extensions: list[str] = []
root_doc = "index"
exclude_patterns = ["_build"]
html_theme = "alabaster"
