"""Imported by nothing: if a worker ever imports it because a payload named it, it says so.

(Importing a module runs its code; a payload must never be able to make a worker do that.)
"""

import os
from pathlib import Path

_where = os.environ.get("HITL_IMPORT_CANARY")
if _where:
    Path(_where).write_text("imported")


class Anything:
    """A name a payload can point at."""
