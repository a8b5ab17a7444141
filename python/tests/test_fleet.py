"""launch, ls, terminate, reap, costs, reconcile and the services module,
from Python on a FakeCloud: the runtime's verbs the CLI's commands call."""

import pytest

import gpufleet

JOB = gpufleet.Job(gpu=["A10G:1"], hours=6, deadline="24h")


def test_launch_ls_costs_terminate_on_a_fake_cloud():
    cloud = gpufleet.FakeCloud(["aws"], start="2026-01-05T09:00:00Z")
    done = gpufleet.launch(JOB, name="py-launch", image="img", count=2, provider=cloud)
    assert not done["already_launched"]
    ids = sorted(i["id"] for i in done["instances"])
    assert len(ids) == 2 and done["warnings"] == []
    # The same name finds what it launched: nothing new is created.
    again = gpufleet.launch(JOB, name="py-launch", image="img", count=2, provider=cloud)
    assert again["already_launched"]
    assert sorted(i["id"] for i in again["instances"]) == ids
    assert again["idempotency_key"] == done["idempotency_key"]

    listed = gpufleet.ls(provider=cloud)
    assert sorted(r["id"] for r in listed["instances"]) == ids
    assert all(r["job"] == "py-launch" for r in listed["instances"])
    assert gpufleet.ls(job="someone-else", provider=cloud)["instances"] == []

    # An hour later the ledger has spent on both.
    cloud.advance("1h")
    spent = gpufleet.costs(by="job", provider=cloud)
    assert spent["total"]["instances"] == 2
    assert spent["total"]["cost_usd"] > 0 and spent["rows"][0]["job"] == "py-launch"
    assert gpufleet.reconcile(provider=cloud)["ended"] == []

    # A dry-run reap finds nothing forgotten: no expiry, no idle window.
    reaped = gpufleet.reap(provider=cloud)
    assert reaped["dry_run"] and reaped["candidates"] == []

    gone = gpufleet.terminate(job="py-launch", provider=cloud)
    assert sorted(gone["terminated"]) == ids and gone["failed"] == []
    with pytest.raises(gpufleet.NotFound, match="no managed instance matches"):
        gpufleet.terminate(job="py-launch-2", provider=cloud)


@pytest.mark.parametrize(
    "call, error, says",
    [
        (lambda c: gpufleet.costs(by="moon", provider=c), ValueError, "by"),
        (lambda c: gpufleet.costs(since="tomorrow", provider=c), ValueError, "since"),
        (lambda c: gpufleet.launch(JOB, name="x", image="i", count=0, provider=c), ValueError, "count"),
        (lambda c: gpufleet.launch(JOB, name="x", image="i", pool="moon", provider=c), ValueError, "pool"),
        (lambda c: gpufleet.launch(JOB, name="x", provider=c), gpufleet.InvalidInput, "image"),
        (lambda c: gpufleet.launch(name="x", image="i", provider=c), gpufleet.InvalidInput, "--pool"),
        (lambda c: gpufleet.reap(idle="1m", provider=c), ValueError, "at least 5m"),
        (lambda c: gpufleet.reap(idle="1h", below=101, provider=c), ValueError, "below"),
        (lambda c: gpufleet.terminate("i-1", provider=c), TypeError, "ids"),
        (lambda c: gpufleet.terminate(provider=c), gpufleet.InvalidInput, "say what to terminate"),
    ],
)
def test_bad_arguments_name_the_argument(call, error, says):
    cloud = gpufleet.FakeCloud(["aws"])
    with pytest.raises(error, match=says):
        call(cloud)
    # Nothing was launched on the way.
    assert gpufleet.ls(provider=cloud)["instances"] == []


def test_services_read_the_ledger():
    cloud = gpufleet.FakeCloud(["aws"])
    assert gpufleet.services.ls(provider=cloud) == []
    with pytest.raises(gpufleet.NotFound, match="echo"):
        gpufleet.services.status("echo", provider=cloud)
