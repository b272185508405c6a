"""The history database's tables, as SQLAlchemy models.

The schema itself is created and changed by the versioned migrations in
``meddpm/history/migrations/versions``; a test checks that these models and the migrated schema agree.
"""

from __future__ import annotations

import datetime
from typing import Any

from sqlalchemy import JSON, BigInteger, Boolean, DateTime, Float, ForeignKey, Integer, String, UniqueConstraint
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship


class Base(DeclarativeBase):
    """The declarative base of the history tables."""


class Run(Base):
    """One suite or bench run: when, on what code, machine and software, with which options."""

    __tablename__ = "runs"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    # A hash of what was measured (environment and samples), so the same run is stored once however it
    # arrives: appended by the suite, imported from its results.json, or merged from another database.
    fingerprint: Mapped[str] = mapped_column(String(64), unique=True)
    kind: Mapped[str] = mapped_column(String(16))  # suite, bench, or ab (an A/B run against a revision)
    schema: Mapped[str] = mapped_column(String(64))  # the source document's schema
    arch: Mapped[str] = mapped_column(String(64), index=True)
    started_at: Mapped[datetime.datetime] = mapped_column(DateTime)  # UTC, naive
    commit: Mapped[str] = mapped_column(String(80))
    commit_subject: Mapped[str | None] = mapped_column(String(1000))  # the first line of its message, where git knew it
    ci_job: Mapped[str | None] = mapped_column(String(1024))  # the web address of the CI job that measured it
    branch: Mapped[str | None] = mapped_column(String(255))
    host: Mapped[str | None] = mapped_column(String(255))
    gpu_name: Mapped[str | None] = mapped_column(String(255))
    gpu_uuid: Mapped[str | None] = mapped_column(String(64))
    driver: Mapped[str | None] = mapped_column(String(64))
    torch: Mapped[str | None] = mapped_column(String(64))
    cuda: Mapped[str | None] = mapped_column(String(32))
    cudnn: Mapped[str | None] = mapped_column(String(32))
    python: Mapped[str | None] = mapped_column(String(32))
    options: Mapped[dict[str, Any]] = mapped_column(JSON)
    environment: Mapped[dict[str, Any]] = mapped_column(JSON)
    source: Mapped[str] = mapped_column(String(1024))  # the file it came from, or the command that appended it
    added_at: Mapped[datetime.datetime] = mapped_column(DateTime)

    cases: Mapped[list[CaseResult]] = relationship(
        back_populates="run", cascade="all, delete-orphan", order_by="CaseResult.id"
    )


class CaseResult(Base):
    """One case of a run: its figures, raw samples, card state and verdicts."""

    __tablename__ = "case_results"
    __table_args__ = (UniqueConstraint("run_id", "case", name="uq_case_results_run_case"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), index=True)
    case: Mapped[str] = mapped_column(String(255))  # preset/combo/b<batch>, with /ddp<world> for DDP cases
    preset: Mapped[str] = mapped_column(String(64))
    combo: Mapped[str] = mapped_column(String(64))
    batch_size: Mapped[int] = mapped_column(Integer)
    world_size: Mapped[int | None] = mapped_column(Integer)  # None: not a DDP case
    math_precision: Mapped[str | None] = mapped_column(String(16))
    # Median of the per-process medians where the run had several processes, else of its rounds.
    median_ms: Mapped[float] = mapped_column(Float)
    process_medians_ms: Mapped[list[float]] = mapped_column(JSON)
    samples_ms: Mapped[list[float]] = mapped_column(JSON)
    peak_allocated_bytes: Mapped[int | None] = mapped_column(BigInteger)
    peak_reserved_bytes: Mapped[int | None] = mapped_column(BigInteger)
    energy_j_per_iter: Mapped[float | None] = mapped_column(Float)
    energy_samples_j: Mapped[list[float]] = mapped_column(JSON)
    tflops: Mapped[float | None] = mapped_column(Float)
    sm_clock_mean_mhz: Mapped[float | None] = mapped_column(Float)
    sm_clock_min_mhz: Mapped[float | None] = mapped_column(Float)
    temperature_max_c: Mapped[float | None] = mapped_column(Float)
    throttle_reasons: Mapped[list[str]] = mapped_column(JSON)
    clock_event_reasons: Mapped[list[str]] = mapped_column(JSON)
    reliable: Mapped[bool | None] = mapped_column(Boolean)
    outcome: Mapped[str | None] = mapped_column(String(32))
    verdicts: Mapped[list[str]] = mapped_column(JSON)
    details: Mapped[dict[str, Any]] = mapped_column(JSON)  # every other field of the source, kept as it came

    run: Mapped[Run] = relationship(back_populates="cases")


class Acknowledgement(Base):
    """A regression marked as known and expected (``meddpm-history ack``): ``check`` no longer fails on it.

    It names the series and the step as ``check`` saw it; it covers that series' open regression as long as the
    step started no later than ``through``, the series' newest run when it was acknowledged, so a step that
    starts after it (the same series regressing again after a fix) is open anew.
    """

    __tablename__ = "acknowledgements"
    __table_args__ = (UniqueConstraint("arch", "case", "metric", "step_started_at", name="uq_acknowledgements_step"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    arch: Mapped[str] = mapped_column(String(64))
    case: Mapped[str] = mapped_column(String(255))  # as check prints it: preset/combo/b<batch>[/p<N>], or all cases
    metric: Mapped[str] = mapped_column(String(16))
    step_commit: Mapped[str] = mapped_column(String(80))  # the first commit after the step
    step_started_at: Mapped[datetime.datetime] = mapped_column(DateTime)  # its first run's start, UTC
    through: Mapped[datetime.datetime] = mapped_column(DateTime)  # the series' newest run then, UTC
    note: Mapped[str] = mapped_column(String(2000))
    acknowledged_at: Mapped[datetime.datetime] = mapped_column(DateTime)  # UTC

    @property
    def key(self) -> tuple[str, str, str, datetime.datetime]:
        """What makes an acknowledgement the same one, however often it is imported."""
        return self.arch, self.case, self.metric, self.step_started_at
