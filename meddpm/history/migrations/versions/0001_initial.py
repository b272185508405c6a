"""The first schema: runs and their case results.

Revision ID: 0001
Revises:
"""

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Create the runs and case_results tables."""
    op.create_table(
        "runs",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("fingerprint", sa.String(64), nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("schema", sa.String(64), nullable=False),
        sa.Column("arch", sa.String(64), nullable=False),
        sa.Column("started_at", sa.DateTime(), nullable=False),
        sa.Column("commit", sa.String(80), nullable=False),
        sa.Column("branch", sa.String(255), nullable=True),
        sa.Column("host", sa.String(255), nullable=True),
        sa.Column("gpu_name", sa.String(255), nullable=True),
        sa.Column("gpu_uuid", sa.String(64), nullable=True),
        sa.Column("driver", sa.String(64), nullable=True),
        sa.Column("torch", sa.String(64), nullable=True),
        sa.Column("cuda", sa.String(32), nullable=True),
        sa.Column("cudnn", sa.String(32), nullable=True),
        sa.Column("python", sa.String(32), nullable=True),
        sa.Column("options", sa.JSON(), nullable=False),
        sa.Column("environment", sa.JSON(), nullable=False),
        sa.Column("source", sa.String(1024), nullable=False),
        sa.Column("added_at", sa.DateTime(), nullable=False),
        sa.UniqueConstraint("fingerprint"),
    )
    op.create_index("ix_runs_arch", "runs", ["arch"])
    op.create_table(
        "case_results",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("run_id", sa.Integer(), sa.ForeignKey("runs.id", ondelete="CASCADE"), nullable=False),
        sa.Column("case", sa.String(255), nullable=False),
        sa.Column("preset", sa.String(64), nullable=False),
        sa.Column("combo", sa.String(64), nullable=False),
        sa.Column("batch_size", sa.Integer(), nullable=False),
        sa.Column("world_size", sa.Integer(), nullable=True),
        sa.Column("math_precision", sa.String(16), nullable=True),
        sa.Column("median_ms", sa.Float(), nullable=False),
        sa.Column("process_medians_ms", sa.JSON(), nullable=False),
        sa.Column("samples_ms", sa.JSON(), nullable=False),
        sa.Column("peak_allocated_bytes", sa.BigInteger(), nullable=True),
        sa.Column("peak_reserved_bytes", sa.BigInteger(), nullable=True),
        sa.Column("energy_j_per_iter", sa.Float(), nullable=True),
        sa.Column("energy_samples_j", sa.JSON(), nullable=False),
        sa.Column("tflops", sa.Float(), nullable=True),
        sa.Column("sm_clock_mean_mhz", sa.Float(), nullable=True),
        sa.Column("sm_clock_min_mhz", sa.Float(), nullable=True),
        sa.Column("temperature_max_c", sa.Float(), nullable=True),
        sa.Column("throttle_reasons", sa.JSON(), nullable=False),
        sa.Column("clock_event_reasons", sa.JSON(), nullable=False),
        sa.Column("reliable", sa.Boolean(), nullable=True),
        sa.Column("outcome", sa.String(32), nullable=True),
        sa.Column("verdicts", sa.JSON(), nullable=False),
        sa.Column("details", sa.JSON(), nullable=False),
        sa.UniqueConstraint("run_id", "case", name="uq_case_results_run_case"),
    )
    op.create_index("ix_case_results_run_id", "case_results", ["run_id"])


def downgrade() -> None:
    """Drop both tables."""
    op.drop_table("case_results")
    op.drop_table("runs")
