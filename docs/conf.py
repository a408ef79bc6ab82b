"""Sphinx configuration for the hardgrad documentation.

Built by ``make docs`` (``sphinx-build -W --keep-going -b html docs docs/_build/html``).
Everything needed is local: no remote inventories are fetched at build time.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "_ext"))
# The package is installed in editable mode; this keeps a plain checkout working too.
sys.path.insert(0, str(HERE.parent / "src"))

os.environ.setdefault("MPLBACKEND", "Agg")

import hardgrad  # noqa: E402

project = "hardgrad"
author = "The hardgrad developers"
copyright = "the hardgrad developers"
version = release = hardgrad.__version__

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx.ext.mathjax",
    # MathJax 3 served from the built site itself (_static/mathjax/tex-chtml.js), not a CDN:
    # the pages render their math offline.
    "sphinx-mathjax-offline",
    "sphinx.ext.viewcode",
    "registry_tables",
    "kinks_table",
]

source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
root_doc = "index"
exclude_patterns = ["_build", "Thumbs.db", ".DS_Store", "conftest.py", "results"]
templates_path: list[str] = []

# -- MyST -------------------------------------------------------------------------------
myst_enable_extensions = ["dollarmath", "amsmath", "colon_fence", "deflist"]
myst_heading_anchors = 3

# -- autodoc / napoleon -------------------------------------------------------------------
autodoc_typehints = "description"
autodoc_typehints_description_target = "documented_params"
autodoc_member_order = "bysource"
# Modules get only the docstrings they write: an inherited ``forward`` would otherwise show
# torch.nn.Module's generic text on every module of hardgrad.nn.
autodoc_inherit_docstrings = False
autodoc_preserve_defaults = True
napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_use_rtype = False
napoleon_attr_annotations = True
# The base class documents its ClassVars under this heading.
napoleon_custom_sections = [("Class attributes", "Attributes")]

# No intersphinx: the build runs without network access. Unresolved references to torch
# objects stay plain text; nitpicky mode would flag each of them, so it stays off.
nitpicky = False

# -- HTML -------------------------------------------------------------------------------
html_theme = "furo"
html_title = f"hardgrad {release}"
html_static_path: list[str] = []
