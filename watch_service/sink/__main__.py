"""``python -m watch_service.sink``: the same as ``auditsync sink``."""
import sys

from . import main

sys.exit(main())
