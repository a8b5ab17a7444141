"""gpufleet's Python package against the CLI: the same catalog, the same
placer, the same rows; its errors as exceptions."""

import json
import os
import subprocess
import tempfile

import pytest

import gpufleet


def cli(*args):
    """`gpufleet ARGS -o json` (the binary the test command built), with an
    empty config and no ledger of its own."""
    binary = os.environ.get("GPUFLEET_BIN")
    if not binary:
        pytest.skip("GPUFLEET_BIN names no gpufleet binary")
    with tempfile.TemporaryDirectory() as d:
        config = os.path.join(d, "gpufleet.toml")
        open(config, "w").close()
        env = dict(os.environ, GPUFLEET_CONFIG=config, GPUFLEET_LEDGER=os.path.join(d, "l.sqlite3"))
        out = subprocess.run(
            [binary, *args, "-o", "json"], env=env, capture_output=True, text=True, check=True
        )
    return json.loads(out.stdout)


def test_place_gives_the_decision_and_rows_of_the_cli():
    p = gpufleet.place(gpu=["A100:8"], hours=30, deadline="72h")
    rows = cli("place", "--gpu", "A100:8", "--hours", "30", "--deadline", "72h", "--no-ledger")
    assert [r.to_dict() for r in p.plans] == rows
    assert p.chosen is not None and p.chosen.chosen
    assert p.decision.startswith("start ")
    # The expected cost decided on is the one the decision names.
    assert p.chosen.instance_type in p.decision
    assert f"${p.chosen.expected_cost_usd:.2f} expected to finish" in p.decision
    assert p.to_dict()["plans"] == rows


def test_a_job_object_and_keywords_are_the_same_job():
    job = gpufleet.Job(gpu=["H100:8", "A100-80GB:8"], hours=20, deadline="48h")
    assert gpufleet.place(job) == gpufleet.place(gpu=["H100:8", "A100-80GB:8"], hours=20, deadline="48h")


def test_offers_are_the_cli_rows():
    mine = gpufleet.offers(gpu=["H100:8"], capacity="spot")
    assert mine, "the embedded catalog has spot 8xH100"
    assert all(o.gpu_model == "H100" and o.gpu_count == 8 and o.capacity == "spot" for o in mine)
    rows = cli("offers", "--gpu", "H100:8", "--capacity", "spot")
    assert [o.to_dict() for o in mine] == rows
    everything = gpufleet.offers(gpu=["H100:8"], capacity="spot", limit=0)
    assert len(everything) > len(mine) == 20
    assert [o.to_dict() for o in everything] == cli(
        "offers", "--gpu", "H100:8", "--capacity", "spot", "--limit", "0"
    )


@pytest.mark.parametrize(
    "words, error, says",
    [
        ({"gpu": ["A100:8"], "hours": -1}, ValueError, "hours: -1"),
        ({"gpu": ["A100:8"], "hours": 3, "deadline": "soon"}, ValueError, "deadline:"),
        ({"gpu": ["A100:8"], "hours": 3, "cloud": ["ibm"]}, ValueError, "cloud: unknown cloud 'ibm'; valid: aws, gcp, azure"),
        ({"gpu": ["A100:8"], "hours": 3, "region": ["mars-1"]}, ValueError, "region: unknown region 'mars-1'"),
        ({"gpu": ["Z9000:8"], "hours": 3}, ValueError, "gpu:"),
        ({"gpu": "A100:8", "hours": 3}, TypeError, "gpu: expected a list"),
        ({"gpu": ["A100:8"], "hours": 3, "colour": "red"}, TypeError, "colour"),
    ],
)
def test_bad_arguments_name_the_argument(words, error, says):
    with pytest.raises(error) as e:
        gpufleet.place(**words)
    assert says in str(e.value)


def test_a_deadline_no_pool_can_meet_is_said_in_the_decision():
    p = gpufleet.place(gpu=["A100:8"], hours=30, deadline="1h")
    assert "the deadline cannot be met" in p.decision
    assert p.chosen is not None and p.chosen.capacity == "on-demand"
    assert not any(r.feasible for r in p.plans)


def test_a_job_the_placer_refuses_raises_invalid_input_with_its_fields():
    with pytest.raises(gpufleet.InvalidInput) as e:
        gpufleet.place(gpu=["A100:8"], hours=30, checkpoint_interval="1m", checkpoint_cost="2m")
    err = e.value
    assert isinstance(err, gpufleet.Error)
    assert err.kind == "invalid-input"
    assert err.message and err.message in str(err)
    assert err.cloud is None


def test_every_error_kind_is_an_error():
    kinds = [
        gpufleet.NotFound, gpufleet.AlreadyExists, gpufleet.InsufficientCapacity,
        gpufleet.QuotaExceeded, gpufleet.RateLimited, gpufleet.Unauthenticated,
        gpufleet.PermissionDenied, gpufleet.InvalidInput, gpufleet.Unsupported,
        gpufleet.Timeout, gpufleet.Unavailable, gpufleet.Conflict, gpufleet.Unexpected,
    ]
    assert all(issubclass(k, gpufleet.Error) and issubclass(k, Exception) for k in kinds)


EXAMPLE = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "jobs", "finetune.toml")


def test_a_job_file_is_placed_as_place_job_places_it():
    job = gpufleet.Job.from_file(EXAMPLE)
    # Its fields say what the file says.
    assert job.name == "finetune-llama-8b" and job.hours == 6.0
    assert list(job.gpu) == ["A10G:1", "A10:1"] and job.deadline == "24h"
    assert job.checkpoint_interval == "30m" and job.restart_overhead == "5m"
    assert list(job.cloud or []) == ["aws", "azure"] and job.run and job.setup and job.checkpoint
    p = gpufleet.place(job, limit=0)
    rows = cli("place", "--job", EXAMPLE, "--no-ledger", "--limit", "0")
    assert [r.to_dict() for r in p.plans] == rows
    assert {r.cloud for r in p.plans} <= {"aws", "azure"}, "the file's clouds"


def test_a_bad_job_file_names_the_file_and_the_key(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text(open(EXAMPLE).read().replace('hours = 6', 'hours = -6'))
    with pytest.raises(gpufleet.InvalidInput) as e:
        gpufleet.place(gpufleet.Job.from_file(bad))
    assert str(bad) in e.value.message and "hours" in e.value.message
    with pytest.raises(ValueError, match="path: no job file"):
        gpufleet.Job.from_file(tmp_path / "missing.toml")


def test_the_declared_fields_are_the_rows_fields():
    plan = gpufleet.place(gpu=["L4:1"], hours=2).plans[0]
    offer = gpufleet.offers(gpu=["L4:1"], limit=1)[0]
    for row, cls in ((plan, gpufleet.Plan), (offer, gpufleet.Offer)):
        declared = set(cls.__annotations__)
        assert declared == set(row.to_dict()), declared ^ set(row.to_dict())
        for name in declared:
            getattr(row, name)
    with pytest.raises(AttributeError, match="has no field 'colour'"):
        plan.colour


def test_fit_gives_the_document_of_the_cli():
    f = gpufleet.fit(model="llama-3-8b", training="lora", context=4096, batch=2)
    doc = cli("fit", "--model", "llama-3-8b", "--training", "lora", "--context", "4096", "--batch", "2")
    assert f.to_dict() == doc
    assert f.total_gib == doc["total_gib"] and f.configs and len(f.configs) <= 15
    assert [c.to_dict() for c in f.configs] == doc["configs"]
    assert set(gpufleet.Config.__annotations__) == set(doc["configs"][0])
    seventy = gpufleet.fit(params="70B", gpu=["H100"], limit=0)
    assert seventy.to_dict() == cli("fit", "--params", "70B", "--gpu", "H100", "--limit", "0")
    assert all(c.gpu_model == "H100" for c in seventy.configs)


@pytest.mark.parametrize(
    "words, error, says",
    [
        ({}, TypeError, "give params"),
        ({"params": "seven"}, ValueError, "params:"),
        ({"model": "no-such-model"}, ValueError, "model:"),
        ({"params": "7B", "training": "rlhf"}, ValueError, "training: unknown training 'rlhf'"),
        ({"params": "7B", "batch": 0}, ValueError, "batch: 0 is not a whole number"),
        ({"params": "7B", "precision": "fp3"}, ValueError, "precision:"),
        ({"params": "7B", "gpu": "H100"}, TypeError, "gpu: expected a list"),
    ],
)
def test_bad_fit_arguments_name_the_argument(words, error, says):
    with pytest.raises(error) as e:
        gpufleet.fit(**words)
    assert says in str(e.value)
