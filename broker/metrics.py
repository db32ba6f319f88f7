"""The metrics endpoint: Prometheus text on ``http://127.0.0.1:PORT/metrics``.

``python -m broker --metrics-port PORT`` starts it (the optional ``metrics`` extra
brings ``prometheus_client``). Every name starts ``intercom_``.

Threading: the broker's loop owns the engine; the HTTP server answers on
``prometheus_client``'s threads and never touches it. Once a second the loop hands
the exporter a :class:`Snapshot` (the engine's figures, built fresh from plain
values, and a copy of the commit histogram) by replacing one attribute; a scrape
reads that attribute once and builds every metric from it. So a scrape costs the
loop nothing, and shows numbers at most a second old, all from one moment.
"""

from __future__ import annotations

import importlib.metadata
from dataclasses import dataclass
from typing import Any, Iterator

from prometheus_client import (CollectorRegistry, PlatformCollector, ProcessCollector,
                               start_http_server)
from prometheus_client.core import (CounterMetricFamily, GaugeMetricFamily,
                                    HistogramMetricFamily, Metric)

from schemas.limits import PROTOCOL_VERSION
from schemas.names import SESSION_KINDS

from .commit_times import BUCKETS_S, CommitSnapshot

METRICS_ADDRESS = "127.0.0.1"      # never beyond this host: the figures name sessions' kinds


@dataclass(frozen=True, slots=True)
class Snapshot:
    figures: dict[str, Any]          # Engine.figures(): owned by nobody else once handed over
    commits: CommitSnapshot


class _Collector:
    """Metric families from the latest snapshot (None until the loop hands one over)."""

    def __init__(self) -> None:
        self.snapshot: Snapshot | None = None

    def collect(self) -> Iterator[Metric]:
        snapshot = self.snapshot          # one read: the loop may replace it meanwhile
        if snapshot is None:
            return
        yield from families(snapshot)


def families(snapshot: Snapshot) -> Iterator[Metric]:
    """Every metric of one snapshot."""
    f = snapshot.figures
    sessions = GaugeMetricFamily("intercom_sessions", "Sessions connected to this broker, "
                                 "by kind (control connections included)", labels=["kind"])
    by_kind = f["sessions"]["byKind"]
    for kind in sorted({*SESSION_KINDS, *by_kind}):
        sessions.add_metric([kind], by_kind.get(kind, 0))
    yield sessions
    yield _gauge("intercom_mirrored_sessions", "Sessions of other brokers known here",
                 f["sessions"]["mirrored"])
    yield _gauge("intercom_groups", "Groups with at least one member", f["groups"]["count"])
    runs = GaugeMetricFamily("intercom_runs", "Workflow runs by state", labels=["state"])
    for state in ("live", "dormant", "closed"):
        runs.add_metric([state], f["runs"][state])
    yield runs
    yield _gauge("intercom_queued_entries", "Sticky entries queued for workflow stages",
                 f["queues"]["entries"])
    yield _gauge("intercom_queued_bytes", "Bytes held by queued sticky entries",
                 f["queues"]["bytes"])
    yield _gauge("intercom_backlog_bytes", "Bytes sent to sessions and not yet read, summed",
                 f["backlog"]["bytes"])
    yield _gauge("intercom_pending_asks", "Asks waiting for their reply", f["asks"]["pending"])
    invocations = GaugeMetricFamily("intercom_invocations", "Invoke jobs held, by state",
                                    labels=["state"])
    for state in ("queued", "started"):
        invocations.add_metric([state], f["invocations"][state])
    yield invocations
    yield _gauge("intercom_conversations", "Agents' conversations known (live or kept)",
                 f["conversations"]["total"])
    counters = f["counters"]
    yield CounterMetricFamily("intercom_messages_routed", "Messages handed to sessions here",
                              value=counters["messagesRouted"])
    yield CounterMetricFamily("intercom_asks_settled", "Asks settled (answered, failed or "
                              "timed out)", value=counters["asksSettled"])
    refused = CounterMetricFamily("intercom_refusals", "Refused requests, by error code",
                                  labels=["code"])
    for code, count in counters["refusals"].items():
        refused.add_metric([code], count)
    yield refused
    brokers = f["brokers"]
    yield _gauge("intercom_links", "Links to other brokers that are up", brokers["links"])
    yield _gauge("intercom_brokers", "Other brokers known on the database and not gone",
                 sum(1 for peer in brokers["peers"] if not peer["gone"]))
    store = f["store"]
    yield _gauge("intercom_store_pending_records", "Store writes handed to the persistence "
                 "worker and not yet done", store["pendingRecords"])
    if store["fileBytes"] is not None:
        yield _gauge("intercom_store_file_bytes", "Size of the database file and its WAL",
                     store["fileBytes"])
    commits = snapshot.commits
    bounds = [f"{bound:g}" for bound in BUCKETS_S] + ["+Inf"]
    yield HistogramMetricFamily("intercom_commit_seconds", "Duration of the store's commits",
                                buckets=list(zip(bounds, commits.buckets)),
                                sum_value=commits.sum_s)


class _BuildInfo:
    """``intercom_build_info{version, protocol}`` 1: what is running."""

    def __init__(self) -> None:
        try:
            version = importlib.metadata.version("intercom-bus")
        except importlib.metadata.PackageNotFoundError:
            version = "unknown"
        self._family = GaugeMetricFamily("intercom_build_info", "The broker's version and "
                                         "wire protocol version", labels=["version", "protocol"])
        self._family.add_metric([version, str(PROTOCOL_VERSION)], 1)

    def collect(self) -> Iterator[Metric]:
        yield self._family


def _gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, value=value)


class Exporter:
    """The HTTP endpoint and the collector it reads. ``publish`` from the loop."""

    def __init__(self, port: int) -> None:
        """Raises OSError when the port cannot be bound."""
        self._collector = _Collector()
        registry = CollectorRegistry(auto_describe=False)
        registry.register(self._collector)
        # The process's own series (process_cpu_seconds_total, process_resident_memory_bytes,
        # process_open_fds, process_start_time_seconds, ...) and python_info.
        ProcessCollector(registry=registry)
        PlatformCollector(registry=registry)
        registry.register(_BuildInfo())
        self._server, self._thread = start_http_server(port, addr=METRICS_ADDRESS,
                                                       registry=registry)
        self.port = self._server.server_port

    def publish(self, snapshot: Snapshot) -> None:
        self._collector.snapshot = snapshot

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)
