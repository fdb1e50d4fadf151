"""db/models.py: the ``Mapped[]`` annotations the type checker reads name
exactly the mapped table's columns, with ``None`` where the column allows NULL."""
from __future__ import annotations

import pytest
from sharemgr.db import models

MODELS = sorted((c for c in vars(models).values()
                 if isinstance(c, type) and issubclass(c, models.Base) and c is not models.Base),
                key=lambda c: c.__name__)


@pytest.mark.parametrize("model", MODELS, ids=lambda c: c.__name__)
def test_annotations_name_the_columns(model: type[models.Base]) -> None:
    # Its own annotations and its mixins' (the columns several tables share).
    annotated = {k: v for c in reversed(model.__mro__) if c is not models.Base
                 for k, v in vars(c).get("__annotations__", {}).items() if k != "__table__"}
    columns = {c.key: c for c in model.__table__.columns}
    assert set(annotated) == set(columns)
    for key, col in columns.items():
        assert annotated[key].startswith("Mapped["), key
        assert ("| None" in annotated[key]) == bool(col.nullable), (key, annotated[key])


def test_every_table_with_a_model_is_listed() -> None:
    assert {m.__table__.name for m in MODELS} <= set(models.Base.metadata.tables)
    assert len(MODELS) >= 20
