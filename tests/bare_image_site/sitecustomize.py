"""Python imports this at start-up where tests.bare_image puts this folder on PYTHONPATH: a child
process of a bare-image run (a benchmark's measuring child, a test's subprocess, torchrun's
workers) hides the image's absent packages as its parent does. This machine's interpreter has no
sitecustomize of its own for this one to shadow (tests/test_bare_image.py checks)."""

import importlib.util
import os
from pathlib import Path

if os.environ.get("ZOOMATTN_BARE_IMAGE") == "1":
    _spec = importlib.util.spec_from_file_location(
        "_zoomattn_bare_image", Path(__file__).resolve().parent.parent / "bare_image.py"
    )
    _module = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(_module)
    _module.hide()
