"""`images list` fits 80 columns whatever the lock; `images show` has every detail."""

from __future__ import annotations

from evaluator_host.cli.operate.images import compact_rows, detail_lines
from evaluator_host.sandbox.docker.images import ImageInfo

BIG = ImageInfo(
    runtime_id="python-13674aa4ee5d2d0c9e1f",
    image_id="sha256:" + "a" * 64,
    language="python",
    packages={"pandas": "2.2.3", "scikit-learn": "1.5.2", "numpy": "1.26.4"},
    lock=[f"package-{i}==1.0.{i}" for i in range(25)],
    size_bytes=812_000_000,
    created="2026-11-22T09:15:42",
    last_used=1_790_000_000.0,
)


def test_list_rows_are_short_whatever_the_lock() -> None:
    (row,) = compact_rows([BIG])
    assert row[0] == BIG.runtime_id and row[2] == "25" and row[3] == "812 MB"
    assert row[1] == "pandas==2.2.3 +2"  # as many pins as fit, then how many more
    widths = [len(cell) for cell in row]
    assert sum(widths) + 2 * (len(row) - 1) <= 80


def test_show_has_every_detail_and_the_whole_lock() -> None:
    lines = detail_lines(BIG)
    assert "packages   pandas==2.2.3 scikit-learn==1.5.2 numpy==1.26.4" in lines
    assert "lock       25 packages" in lines and lines[-1] == "  package-24==1.0.24"
