"""`servelens scrape`: poll engines' /metrics into the store (pipeline/scrape.py)."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

# cli imports this module from _register_commands(), after cli itself is complete
from .options import StoreOpt, duration_option, fail, store_path


def register(app: typer.Typer) -> None:
    @app.command()
    def scrape(
        urls: Annotated[list[str], typer.Argument(help="Servers' /metrics URLs (host:port is enough; /metrics is added).", show_default=False)],
        store: StoreOpt = None,  # type: ignore[assignment]
        interval: Annotated[str, typer.Option("--interval", "-i", help="Time between scrapes (5s, 1m, 500ms, or seconds).")] = "5s",
        instance: Annotated[Optional[list[str]], typer.Option("--instance", help="Instance name of each URL's samples, once per URL in order (default: the instance of the same server's log in the store, else host:port).", show_default=False)] = None,
        count: Annotated[Optional[int], typer.Option("--count", "-n", help="Stop after this many rounds (a round scrapes every URL once).", show_default=False)] = None,
        duration: Annotated[Optional[str], typer.Option("--duration", help="Stop after this long (30s, 10m, 2h).", show_default=False)] = None,
    ) -> None:
        """Scrape servers' /metrics every interval into the store, beside their logs. Each
        round is one commit; a sample the store already holds adds nothing. Samples are stored
        under the instance the same server's log has (by the port its log announced, the model,
        or the only instance of that engine), so log and scrapes are one instance. An
        unreachable URL is said once and tried again each round. Runs until Ctrl-C (which
        ends after the round in progress and says what was committed), --count or --duration.

        \b
        Examples:
          servelens scrape http://127.0.0.1:8000/metrics --store live.store
          servelens scrape localhost:8000 localhost:8080 --interval 1s --duration 10m
          servelens scrape 10.0.0.5:8080 --instance llama-a --count 1
          servelens sql "select * from scraped_gauges order by ts desc limit 5" --store live.store
        """
        from ..scrape import ScrapeError, run
        from ..store.manifest import StoreError

        if count is not None and duration is not None:
            raise fail("give --count or --duration, not both")
        interval_s = duration_option(interval, "--interval")
        duration_s = duration_option(duration, "--duration")
        target = store_path(store)
        try:
            stats = run(urls, target, interval_s=interval_s, instances=instance or None, count=count,
                        duration_s=duration_s, say=lambda msg: typer.echo(msg, err=True))
        except (ScrapeError, StoreError) as e:
            raise fail(str(e)) from None
        except KeyboardInterrupt:  # a second Ctrl-C, or one before the handler was set
            raise fail("interrupted: the rounds committed before it are in the store", code=130) from None
        if stats.stopped:
            typer.echo(f"servelens: stopped; {stats.describe()}", err=True)
        else:
            typer.echo(f"{target}: {stats.describe()}")
        if stats.held:
            raise fail(f"{stats.held:,} samples scraped at the end were not committed: the store stayed in use by "
                       "another writer (stop it, or scrape into another --store)")
        if stats.fetched == 0:
            raise fail("nothing was scraped: check the URL, that the server runs, and that it publishes "
                       "/metrics (llama-server needs --metrics)")


def ingest_prometheus_command(paths, store, prometheus, match, step, since, until, instance, as_json) -> None:
    """`servelens ingest --prometheus URL --since T [--until T] [--match SEL] [--step S]`
    (its options are declared with `ingest`'s, in cli.py)."""
    from ..prom_api import PromError, ingest_prometheus
    from ..scrape import check_store, ScrapeError
    from ..store.manifest import StoreError
    from ..query.timerange import parse_time

    if prometheus is None:
        raise fail("--match, --step, --since and --until of ingest are for reading a Prometheus server: "
                   "give --prometheus URL (e.g. http://127.0.0.1:9090); a log is ingested whole")
    if paths:
        raise fail("give log PATHs or --prometheus URL, not both (run two ingests into the same --store)")
    if since is None:
        raise fail("--prometheus needs --since (and --until, default now): the range to read, e.g. --since 2h")
    try:
        t0 = parse_time(since)
        t1 = parse_time(until or "now")
    except ValueError as e:
        raise fail(f"{e} (--since, --until)") from None
    step_s = duration_option(step, "--step")
    target = store_path(store)
    try:
        check_store(target)
        result = ingest_prometheus(target, prometheus, t0, t1, matches=match or None, step_s=step_s,
                                   instance=instance, say=lambda msg: typer.echo(msg, err=True))
    except (PromError, ScrapeError, StoreError) as e:
        raise fail(str(e)) from None
    except KeyboardInterrupt:
        raise fail("interrupted: the chunks committed before it are in the store; the same command "
                   "goes on (samples already stored are not added again)", code=130) from None
    if as_json:
        import json

        typer.echo(json.dumps({"store": str(target), "source": result.source, "samples": result.samples,
                               "new": result.new, "series": result.series, "scrapes": result.scrapes,
                               "instances": result.instances, "notes": result.notes}, indent=2))
        return
    typer.echo(result.describe())
    for note in result.notes:
        typer.echo(f"note: {note}")
