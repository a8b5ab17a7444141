"""mix, simulate, managed jobs on the fake cloud, the jobs module and check,
from Python: the same runtime and the same documents as the CLI."""

import asyncio
import math
import os
import tempfile
import threading
import time
from decimal import Decimal

import pytest

import gpufleet
from test_place import cli

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
TRACES = os.path.join(ROOT, "data", "traces", "2022-11-28T22-23")


def demand(path, hours, f):
    """A profile of `hours` hourly rows from 2026-01-05 (as the CLI's tests write them)."""
    with open(path, "w") as out:
        out.write("time,instances\n")
        for h in range(hours):
            out.write(f"{1767571200 + 3600 * h},{f(h)}\n")
    return path


# --- mix ---------------------------------------------------------------


def test_mix_is_the_cli_document():
    with tempfile.TemporaryDirectory() as d:
        # Four weeks: 6 instances always, 10 more in working hours.
        p = demand(os.path.join(d, "d.csv"), 24 * 28, lambda h: 6 + (10 if 8 <= h % 24 < 18 else 0))
        m = gpufleet.mix(p, gpu="A100:8", region="us-east-1", interruptible_share="30%", discount_1y=35)
        doc = cli(
            "mix", "--profile", p, "--gpu", "A100:8", "--region", "us-east-1",
            "--interruptible-share", "30%", "--discount-1y", "35",
        )
    # The same document, each input's source in its front end's words.
    mine = m.to_dict()
    share = [i for i in mine["inputs"] if i["name"] == "interruptible share"]
    assert [i["source"] for i in share] == ["user input: interruptible_share=30%"]
    share[0]["source"] = "user input: --interruptible-share 30%"
    assert mine == doc
    assert m.recommended.to_dict() == doc["recommended"]
    assert [o.to_dict() for o in m.options] == doc["options"]
    assert m.recommended.monthly_usd == min(o.monthly_usd for o in m.options)
    # The declared fields are the rows' keys.
    assert set(gpufleet.MixOption.__annotations__) == set(doc["recommended"])


def test_mix_bad_words_name_the_argument():
    with tempfile.TemporaryDirectory() as d:
        p = demand(os.path.join(d, "d.csv"), 24 * 8, lambda h: 4)
        with pytest.raises(ValueError, match="interruptible_share"):
            gpufleet.mix(p, gpu="A100:8", region="us-east-1", interruptible_share=1.5)
        with pytest.raises(ValueError, match="discount_3y"):
            gpufleet.mix(p, gpu="A100:8", region="us-east-1", discount_3y="120%")
        with pytest.raises(ValueError, match="region"):
            gpufleet.mix(p, gpu="A100:8", region="us-east-9")
        with pytest.raises(TypeError, match="gpu.*instance_type"):
            gpufleet.mix(p, region="us-east-1")
        with pytest.raises(gpufleet.InvalidInput, match="spot-price"):
            gpufleet.mix(p, gpu="A100:8", region="us-east-1", spot_price=1.0)
    with pytest.raises(ValueError, match="profile"):
        gpufleet.mix("/nonexistent.csv", gpu="A100:8", region="us-east-1")


# --- simulate ------------------------------------------------------------


def test_simulate_is_the_cli_document_on_a_trace_window():
    s = gpufleet.simulate(
        TRACES, instance_type=["p2.xlarge"], job_hours=4, deadline_hours=6, starts=10
    )
    doc = cli(
        "simulate", "--traces", TRACES, "--instance-type", "p2.xlarge",
        "--job-hours", "4", "--deadline-hours", "6", "--starts", "10",
    )
    assert [s.to_dict()] == doc
    assert {r.policy for r in s.results} >= {"gpufleet", "on-demand"}
    assert s.result("on-demand").deadline_misses == 0
    assert set(gpufleet.PolicyResult.__annotations__) == set(doc[0]["results"][0])
    with pytest.raises(KeyError, match="no policy 'nope'"):
        s.result("nope")


def test_simulate_bad_words_name_the_argument():
    with pytest.raises(ValueError, match="starts"):
        gpufleet.simulate(TRACES, instance_type=["p2.xlarge"], starts=0)
    with pytest.raises(ValueError, match="job_hours"):
        gpufleet.simulate(TRACES, instance_type=["p2.xlarge"], job_hours=math.nan)
    with pytest.raises(ValueError, match="policies"):
        gpufleet.simulate(TRACES, instance_type=["p2.xlarge"], policies=["cheapest-ever"])
    with pytest.raises(gpufleet.InvalidInput, match="pools manifest"):
        gpufleet.simulate("/nonexistent")


# --- managed jobs on the fake cloud --------------------------------------

JOB = gpufleet.Job(gpu=["A10G:1"], hours=6, deadline="24h", name="finetune")


def pool_of(plan):
    where = plan.region if plan.zone is None else f"{plan.region}/{plan.zone}"
    return f"{plan.cloud}:{where}:{plan.instance_type}:{plan.capacity}"


def test_a_managed_job_survives_a_scripted_preemption_and_its_cost_is_the_bill():
    cloud = gpufleet.FakeCloud(start="2026-01-05T09:00:00Z")
    done = gpufleet.run(JOB, provider=cloud, script=["2h preempt"])
    assert done.succeeded and done.state == "succeeded"
    assert done.preemptions == 1 and done.attempts == 2
    assert done.progress_hours == pytest.approx(6.0)
    assert done.outcome["state"] == "succeeded"
    # The spend the ledger reports is what the clouds billed.
    assert Decimal(cloud.billed()) == Decimal(str(done.cost_so_far_usd))
    assert cloud.instances() == [], "nothing is left running"
    # The ledger tells the same story.
    listed = gpufleet.jobs.ls(provider=cloud)
    assert [j.id for j in listed.jobs] == [done.id]
    assert listed.jobs[0].to_dict() == done.to_dict()
    assert Decimal(listed.cost_per_completed_job_usd) == Decimal(cloud.billed())
    shown = gpufleet.jobs.show(done.id, provider=cloud)
    assert shown.job.state == "succeeded" and len(shown.pools) == 2
    assert [e["state"] for e in shown.events][0] == "placing"
    assert "interrupted" in [e["state"] for e in shown.events]
    # The same job under the same id finds the job it made: nothing runs again.
    again = gpufleet.run(JOB, provider=cloud)
    assert again.id == done.id and again.attempts == done.attempts
    assert Decimal(cloud.billed()) == Decimal(str(done.cost_so_far_usd))


def test_a_run_starts_where_place_decided():
    cloud = gpufleet.FakeCloud()
    chosen = gpufleet.place(JOB).chosen
    done = gpufleet.run(JOB, provider=cloud)
    assert done.preemptions == 0
    shown = gpufleet.jobs.show(done.id, provider=cloud)
    assert shown.pools[0] == pool_of(chosen)


def test_a_pool_out_of_capacity_and_a_failed_launch_are_gone_around():
    cloud = gpufleet.FakeCloud()
    chosen = pool_of(gpufleet.place(JOB).chosen)
    cloud.set_out_of_capacity(chosen)
    cloud.fail_next("launch", "rate-limited")
    done = gpufleet.run(JOB, provider=cloud)
    assert done.succeeded
    assert chosen not in gpufleet.jobs.show(done.id, provider=cloud).pools
    assert cloud.call_count("launch") >= 2


def test_a_job_that_fails_raises_job_failed_unless_told_not_to():
    cloud = gpufleet.FakeCloud()
    with pytest.raises(gpufleet.JobFailed) as e:
        gpufleet.run(JOB, provider=cloud, id="fails-1", script=["1h exit 3"])
    assert e.value.result.state == "failed"
    assert isinstance(e.value, gpufleet.Error) and e.value.kind == "job-failed"
    r = gpufleet.run(JOB, provider=cloud, id="fails-2", script=["1h exit 3"], check=False)
    assert r.state == "failed" and not r.succeeded


def test_a_cancel_from_another_thread_is_final():
    cloud = gpufleet.FakeCloud()
    # Each listing takes real time, so the 6-hour job's drive lasts long
    # enough to be cancelled while it runs.
    cloud.set_latency("list_instances", "100ms")
    out = {}

    def drive():
        out["result"] = gpufleet.run(JOB, provider=cloud, id="cancel-me", check=False)

    t = threading.Thread(target=drive)
    t.start()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        jobs = gpufleet.jobs.ls(provider=cloud).jobs
        if jobs and jobs[0].state == "running":
            break
        time.sleep(0.05)
    running = cloud.instances()
    assert [i["job"] for i in running] == ["cancel-me"]
    assert running[0]["price_per_hour_usd"] > 0 and running[0]["state"] == "running"
    cancelled = gpufleet.jobs.cancel("cancel-me", provider=cloud)
    assert cancelled["state"] == "cancelled"
    t.join(60)
    assert not t.is_alive()
    assert out["result"].state == "cancelled"
    assert cloud.instances() == []
    assert gpufleet.jobs.show("cancel-me", provider=cloud).job.state == "cancelled"


def test_on_event_hears_every_transition_in_order():
    cloud = gpufleet.FakeCloud()
    events = []
    done = gpufleet.run(JOB, provider=cloud, id="told", script=["2h preempt"], on_event=events.append)
    shown = gpufleet.jobs.show("told", provider=cloud)
    assert events == shown.events, "each transition once, oldest first"
    assert [e["state"] for e in events][:3] == ["placing", "launching", "running"]
    assert events[-1]["state"] == done.state == "succeeded"
    with pytest.raises(TypeError, match="on_event"):
        gpufleet.run(JOB, provider=cloud, on_event="print")  # type: ignore[arg-type]


def test_run_async_is_awaitable():
    async def main():
        cloud = gpufleet.FakeCloud()
        a, b = await asyncio.gather(
            gpufleet.run_async(JOB, provider=cloud, id="a"),
            gpufleet.run_async(JOB, provider=cloud, id="b"),
        )
        listed = await gpufleet.jobs.ls_async(provider=cloud)
        return a, b, listed

    a, b, listed = asyncio.run(main())
    assert a.succeeded and b.succeeded
    assert sorted(j.id for j in listed.jobs) == ["a", "b"]


def test_a_job_file_runs_and_bad_runs_are_refused_before_anything_is_recorded():
    cloud = gpufleet.FakeCloud()
    path = os.path.join(ROOT, "examples", "jobs", "finetune.toml")
    done = gpufleet.run(path, provider=cloud)
    assert done.succeeded and done.name == "finetune-llama-8b"
    # A job no pool can finish in time is refused, unrecorded.
    with pytest.raises(gpufleet.InvalidInput, match="was not recorded"):
        gpufleet.run(gpufleet.Job(gpu=["A10G:1"], hours=30, deadline="2h"), provider=cloud, id="late")
    with pytest.raises(ValueError, match="script"):
        gpufleet.run(JOB, provider=cloud, script=["2h explode"])
    with pytest.raises(ValueError, match="id"):
        gpufleet.run(JOB, provider=cloud, id="not an id!")
    with pytest.raises(ValueError, match="provider"):
        gpufleet.run(JOB, provider="moon")
    with pytest.raises(TypeError, match="provider"):
        gpufleet.run(JOB, provider=3)  # type: ignore[arg-type]
    with pytest.raises(gpufleet.Unsupported, match="local provider"):
        gpufleet.run(JOB, provider="local")
    with pytest.raises(ValueError, match="settings"):
        gpufleet.run(JOB, provider=cloud, settings={"colour": "blue"})
    assert [j.id for j in gpufleet.jobs.ls(provider=cloud).jobs] == [done.id]
    with pytest.raises(gpufleet.InvalidInput, match="no job 'late'"):
        gpufleet.jobs.show("late", provider=cloud)


def test_the_fake_cloud_from_python():
    cloud = gpufleet.FakeCloud(["aws"], start="2026-01-05T09:00:00Z")
    assert cloud.clouds == ["aws"] and cloud.now == "2026-01-05T09:00:00Z"
    cloud.advance("90m")
    assert cloud.now == "2026-01-05T10:30:00Z"
    assert cloud.billed() == "0.000000" and cloud.instances() == []
    with pytest.raises(ValueError, match="pool"):
        cloud.set_out_of_capacity("aws:us-east-1:p4d.24xlarge")
    with pytest.raises(ValueError, match="cloud.*aws"):
        cloud.set_latency("launch", "1s", cloud="gcp")
    with pytest.raises(ValueError, match="kind.*insufficient-capacity"):
        cloud.fail_next("launch", "bad-luck")
    with pytest.raises(ValueError, match="operation"):
        cloud.fail_next("fly", "timeout")
    with pytest.raises(gpufleet.NotFound, match="no live instance"):
        cloud.preempt("i-nope")
    with pytest.raises(ValueError, match="start"):
        gpufleet.FakeCloud(start="yesterday")
    with pytest.raises(ValueError, match="clouds"):
        gpufleet.FakeCloud(["moon"])


def test_check_reads_each_configured_cloud():
    with tempfile.TemporaryDirectory() as d:
        config = os.path.join(d, "gpufleet.toml")
        with open(config, "w") as f:
            f.write('clouds = ["aws", "gcp"]\n')
        rows = gpufleet.check(provider="fake", config=config)
    assert [r.cloud for r in rows] == ["aws", "gcp"]
    assert all(set(gpufleet.CloudCheck.__annotations__) == set(r.to_dict()) for r in rows)
    with pytest.raises(ValueError, match="timeout"):
        gpufleet.check(timeout="5m")
    # A FakeCloud's clouds are usable; one it does not fake says so.
    fake = gpufleet.check(provider=gpufleet.FakeCloud(["aws"]), clouds=["aws", "gcp"])
    assert [(r.cloud, r.usable) for r in fake] == [("aws", True), ("gcp", False)]
    assert "does not fake gcp" in fake[1].problem


def test_place_with_a_provider_reads_its_ledger():
    cloud = gpufleet.FakeCloud()
    before = gpufleet.place(JOB, provider=cloud, limit=0)
    pool = pool_of(before.chosen)
    gpufleet.run(JOB, provider=cloud, id="seen", script=["1h preempt"])
    after = gpufleet.place(JOB, provider=cloud, limit=0)
    rate = lambda p: next(r.interruption_rate_per_hour for r in p.plans if pool_of(r) == pool)
    # The interruption the ledger saw in that pool raises its rate, as it
    # does for `gpufleet place` and the run's own placements.
    assert rate(after) > rate(before)
    assert rate(gpufleet.place(JOB, limit=0)) == rate(before)
    with pytest.raises(TypeError, match="provider"):
        gpufleet.place(JOB, settings={"ledger": "/tmp/x.sqlite3"})
