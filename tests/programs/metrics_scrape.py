"""Scrape the merged metrics of a directory as ``/metrics`` would: ``metrics_scrape.py DIR``."""

import sys

from vecserve.service.metrics import Metrics

sys.stdout.write(Metrics(directory=sys.argv[1]).render().decode())
