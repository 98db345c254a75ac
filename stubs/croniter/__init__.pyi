# croniter ships no type information. What auditsync_plugin.deadlines uses of it, typed
# after croniter 7.0's signatures; grow it when more of the library is used.
import datetime
from typing import TypeVar

_T = TypeVar("_T")

class croniter:
    def __init__(
        self,
        expr_format: str,
        start_time: datetime.datetime | float | None = None,
        ret_type: type = ...,
        day_or: bool = True,
        max_years_between_matches: int | None = None,
        is_prev: bool = False,
        hash_id: bytes | str | None = None,
        implement_cron_bug: bool = False,
        second_at_beginning: bool = False,
        expand_from_start_time: bool = False,
    ) -> None: ...
    def get_next(
        self,
        ret_type: type[_T],
        start_time: datetime.datetime | float | None = None,
        update_current: bool = True,
    ) -> _T: ...
