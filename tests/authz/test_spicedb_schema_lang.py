"""The SpiceDB schema language, pure: canonical text parses back to the same schema, the stored
(jsonb) form round-trips, and what is out of scope is refused by name."""

from __future__ import annotations

import pytest

from watch_service.protocol import spicedb_checks as checks
from watch_service.protocol import spicedb_schema as lang

pytestmark = pytest.mark.unit

SOURCE = """
/** docs */
definition org/user {}
definition org/doc {
  // comments go
  relation parent: org/doc
  relation viewer: org/user | org/user:* | org/doc#viewer; relation owner: org/user
  permission view = (viewer+owner) - parent->view &
      parent.any(view)
  permission nothing = nil
}
use expiration
"""


def test_canonical_text_round_trips():
    schema = checks.parse(SOURCE)
    text = checks.canonical(schema)
    assert text.startswith("definition org/doc {\n\trelation parent: org/doc\n")
    assert "\tpermission view = (viewer + owner) - parent->view & parent.any(view)\n" in text

    def by_name(s: lang.Schema) -> list:
        return sorted(s.definitions, key=lambda d: d.name)

    assert by_name(checks.parse(text)) == by_name(schema)  # canonical text sorts definitions
    assert lang.Schema.from_json(schema.to_json()) == schema


@pytest.mark.parametrize(
    ("source", "words"),
    [
        ("caveat c(a int) {\n a == 1\n}", "`caveat` is not supported"),
        ("definition doc {\n relation viewer: user with c\n}", "caveats and expiration"),
        ("definition doc {\n relation viewer user\n}", "parse error in `schema`, line 2"),
    ],
)
def test_out_of_scope_is_refused_by_name(source, words):
    with pytest.raises(lang.SchemaError) as err:
        checks.parse(source)
    assert err.value.code == "INVALID_ARGUMENT"
    assert words in err.value.message
