"""Acknowledged regressions: steps marked as known and expected (``meddpm-history ack``).

Revision ID: 0002
Revises: 0001
"""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Create the acknowledgements table."""
    op.create_table(
        "acknowledgements",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("arch", sa.String(64), nullable=False),
        sa.Column("case", sa.String(255), nullable=False),
        sa.Column("metric", sa.String(16), nullable=False),
        sa.Column("step_commit", sa.String(80), nullable=False),
        sa.Column("step_started_at", sa.DateTime(), nullable=False),
        sa.Column("through", sa.DateTime(), nullable=False),
        sa.Column("note", sa.String(2000), nullable=False),
        sa.Column("acknowledged_at", sa.DateTime(), nullable=False),
        sa.UniqueConstraint("arch", "case", "metric", "step_started_at", name="uq_acknowledgements_step"),
    )


def downgrade() -> None:
    """Drop the acknowledgements table."""
    op.drop_table("acknowledgements")
