"""``python -m watch_service.sink``: the same as ``auditsync sink``."""

import sys

from watch_service.sink import main

sys.exit(main())
