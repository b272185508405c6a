"""Each run's commit subject and the CI job that measured it, for the dashboard's hover and run pages.

Revision ID: 0003
Revises: 0002
"""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Add the two columns, empty for the runs stored before: their files did not record them."""
    op.add_column("runs", sa.Column("commit_subject", sa.String(1000), nullable=True))
    op.add_column("runs", sa.Column("ci_job", sa.String(1024), nullable=True))


def downgrade() -> None:
    """Drop the two columns."""
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("ci_job")
        batch.drop_column("commit_subject")
