"""compact_hook's Grafana dashboard, built with Grafana's own Foundation SDK (not hand-written JSON).

    .venv/bin/python deploy/grafana/dashboard.py > deploy/grafana/compact_hook.json

Per model group (the ``model_group`` variable, from the metrics themselves): requests by outcome,
tokens before and after, summary calls per compaction, the hook's time (what a compaction turn
waits), money saved against what summaries cost, recalls; per replica: store health, breakers.
``tests/unit/test_dashboard.py`` keeps the checked-in JSON in step with this script and every
query on a metric the hook exports.
"""

from __future__ import annotations

import json
import sys

from grafana_foundation_sdk.builders import dashboard, prometheus, timeseries
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models.dashboard import DataSourceRef

SOURCE = DataSourceRef(type_val="prometheus", uid="${datasource}")
GROUP = 'model_group=~"$model_group"'
LATENCY = f"sum by (le) (rate(compact_hook_hook_seconds_bucket{{{GROUP}}}[5m]))"
FIRST_CONTACTS = f'sum by (le) (rate(compact_hook_hook_seconds_bucket{{{GROUP}, first_contact="true"}}[5m]))'
"""A conversation's first request to a process (a burst of new sessions, a restart): all of it is new."""
PANEL_WIDTH, PANEL_HEIGHT = 12, 8


def query(expr: str, legend: str) -> prometheus.Dataquery:
    return prometheus.Dataquery().expr(expr).legend_format(legend).datasource(SOURCE)


def panel(title: str, unit: str, *targets: prometheus.Dataquery, empty: str = "") -> timeseries.Panel:
    """A panel; ``empty`` says on it when its series cannot exist (its "No data" is then the answer)."""
    built = timeseries.Panel().title(title).unit(unit).datasource(SOURCE)
    if empty:
        built = built.description(empty)
    for target in targets:
        built = built.with_target(target)
    return built.span(PANEL_WIDTH).height(PANEL_HEIGHT)


NO_SHARED_STORE = (
    "Calls of the shared store (Redis, or the file store the workers of one machine share) that failed, "
    "calls answered by the process's own memory, and times the shared store was set aside. "
    "No data on a process with COMPACT_STORE=memory: its in-process store makes no call that could fail."
)
SHARED_THROUGH = (
    'max by (instance, store) (label_replace(compact_hook_store_file, "store", "file", "", "") '
    'or label_replace(compact_hook_store_redis, "store", "redis $1", "topology", "(.*)"))'
)
"""1 per process for what it shares through: ``file``, or ``redis`` and the topology."""


PANELS = {
    "Requests": [
        panel(
            "Requests by outcome",
            "reqps",
            query(f"sum by (outcome) (rate(compact_hook_requests_total{{{GROUP}}}[5m]))", "{{outcome}}"),
        ),
        panel(
            "Tokens: sent → forwarded",
            "short",
            query(f"sum(rate(compact_hook_tokens_before_total{{{GROUP}}}[5m]))", "sent"),
            query(f"sum(rate(compact_hook_tokens_after_total{{{GROUP}}}[5m]))", "forwarded"),
        ),
        panel(
            "The hook's time (a compaction turn's wait)",
            "s",
            query(f"histogram_quantile(0.5, {LATENCY})", "median"),
            query(f"histogram_quantile(0.99, {LATENCY})", "p99"),
            query(f"histogram_quantile(0.99, {FIRST_CONTACTS})", "p99, first contacts"),
        ),
        panel(
            "Recalls answered",
            "reqps",
            query(f"sum by (outcome) (rate(compact_hook_recalls_total{{{GROUP}}}[5m]))", "{{outcome}}"),
        ),
    ],
    "Summaries": [
        panel(
            "Summary calls per compaction",
            "short",
            query(
                f"sum(rate(compact_hook_summary_calls_total{{{GROUP}}}[15m]))"
                f" / sum(rate(compact_hook_compactions_total{{{GROUP}}}[15m]))",
                "calls per compaction",
            ),
        ),
        panel(
            "Summary failures by kind",
            "reqps",
            query(
                f"sum by (outcome) (rate(compact_hook_summary_failures_total{{{GROUP}}}[5m]))", "{{outcome}}"
            ),
        ),
        panel(
            "Money: saved against summaries' cost (per hour)",
            "currencyUSD",
            query(f"sum(increase(compact_hook_cost_saved_usd_total{{{GROUP}}}[1h]))", "saved"),
            query(f"sum(increase(compact_hook_summary_cost_usd_total{{{GROUP}}}[1h]))", "summaries cost"),
        ),
        panel(
            "Count ratio (provider's tokens per one of ours)",
            "short",
            query(f"max by (model_group) (compact_hook_count_ratio{{{GROUP}}})", "{{model_group}}"),
        ),
    ],
    "Replicas": [
        panel(
            "Store health",
            "ops",
            query("sum by (instance) (rate(compact_hook_store_errors_total[5m]))", "errors {{instance}}"),
            query(
                "sum by (instance) (rate(compact_hook_store_fallbacks_total[5m]))", "fallbacks {{instance}}"
            ),
            query(
                "sum by (instance) (increase(compact_hook_store_outages_total[5m]))", "outages {{instance}}"
            ),
            empty=NO_SHARED_STORE,
        ),
        panel("Shared through", "short", query(SHARED_THROUGH, "{{store}} {{instance}}")),
        panel(
            "Breakers open, prepared summaries unused",
            "short",
            query("max by (instance) (compact_hook_breakers_open)", "breakers {{instance}}"),
            query("max by (instance) (compact_hook_prepared_unused)", "unused {{instance}}"),
        ),
    ],
}


def build() -> dict[str, object]:
    board = (
        dashboard.Dashboard("compact_hook")
        .uid("compact-hook")
        .tags(["compact_hook", "litellm"])
        .refresh("1m")
        .time("now-6h", "now")
        .with_variable(dashboard.DatasourceVariable("datasource").label("Prometheus").type("prometheus"))
        .with_variable(
            dashboard.QueryVariable("model_group")
            .label("Model group")
            .datasource(SOURCE)
            .query("label_values(compact_hook_requests_total, model_group)")
            .multi(True)
            .include_all(True)
            .all_value(".*")
        )
    )
    for title, panels in PANELS.items():
        board = board.with_row(dashboard.Row(title))
        for each in panels:
            board = board.with_panel(each)
    encoded: dict[str, object] = json.loads(json.dumps(board.build(), cls=JSONEncoder))
    return encoded


def render() -> str:
    return json.dumps(build(), indent=2, sort_keys=True) + "\n"


if __name__ == "__main__":
    sys.stdout.write(render())
