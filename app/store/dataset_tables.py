"""Tables of private exemplar sets."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, Boolean, ForeignKey, Integer, String, Text, UniqueConstraint, true
from sqlalchemy.orm import Mapped, mapped_column, relationship

from app.store.base import DEFAULT_TENANT, Base, UTCDateTime, utcnow



class Dataset(Base):
    """An exemplar set. ``visibility`` "private" (the default): exemplar text lives in ``exemplars``
    and never leaves the server. "public": DP output (a synthetic set made by the ``synthesize``
    job from a private parent), readable in full by its tenant; ``provenance`` says how it was made."""

    __tablename__ = "datasets"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    tenant_id: Mapped[str] = mapped_column(String(64), index=True, default=DEFAULT_TENANT)
    name: Mapped[str] = mapped_column(String(200))
    task: Mapped[str] = mapped_column(String(32))
    labels: Mapped[list[str]] = mapped_column(JSON)
    template: Mapped[dict[str, Any]] = mapped_column(JSON)
    exemplar_count: Mapped[int] = mapped_column(Integer)
    label_counts: Mapped[dict[str, int]] = mapped_column(JSON, default=dict)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    # An identical private request returns the stored released answer at no cost (docs/privacy.md).
    answer_reuse: Mapped[bool] = mapped_column(Boolean, default=True, server_default=true())
    # 0011: public synthetic sets and where they come from.
    visibility: Mapped[str] = mapped_column(String(16), default="private", server_default="private")
    provenance: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)

    exemplars: Mapped[list["Exemplar"]] = relationship(
        back_populates="dataset", cascade="all, delete-orphan", passive_deletes=True, order_by="Exemplar.position"
    )


class Exemplar(Base):
    __tablename__ = "exemplars"
    __table_args__ = (UniqueConstraint("dataset_id", "position", name="uq_exemplars_dataset_position"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    dataset_id: Mapped[str] = mapped_column(ForeignKey("datasets.id", ondelete="CASCADE"), index=True)
    position: Mapped[int] = mapped_column(Integer)
    input: Mapped[str] = mapped_column(Text)
    output: Mapped[str] = mapped_column(Text)

    dataset: Mapped[Dataset] = relationship(back_populates="exemplars")
