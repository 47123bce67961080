"""The throughput chart: a readable scale, one bar group per bucket, escaped tooltips."""

from __future__ import annotations

import re

from jobyard.web._chart import chart, nice_ceiling, sparkline
from jobyard.web._data import Bucket


def test_the_scale_rounds_up_to_a_readable_number() -> None:
    assert [nice_ceiling(v) for v in (0, 1, 3, 7, 11, 240, 2600)] == [1, 1, 5, 10, 20, 250, 5000]


def test_each_bucket_is_a_stacked_bar_with_its_tooltip() -> None:
    buckets = [Bucket(60.0 * i, i * 10, i % 2) for i in range(60)]
    svg = chart(buckets, 60, label="<b>q</b>")
    assert svg.count("<title>") == 60
    assert svg.count('class="fail"') == 30 and svg.count('class="done"') == 59
    assert "<b>" not in svg and "&lt;b&gt;q&lt;/b&gt;" in svg
    assert re.search(r">1k</text>", svg) and re.search(r">500</text>", svg)  # peak 591
    assert "00:59" in svg  # the last bucket's time
    spark = sparkline(buckets, 60, label="q")
    assert spark.count('class="done"') == 59 and "17,700 completed, 30 failed" in spark
