//! `gpufleet offers --cloud aws --live` against moto_server (the EC2 API
//! emulator), and its fallback to the snapshot when the API is unreachable.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;
use std::process::{Command, Output};
use support::words;

use gpufleet_testkit::aws::moto;
use std::time::{Duration, Instant};

fn gpufleet(args: &[&str], endpoint: &str) -> Output {
    gpufleet_with(args, endpoint, &[])
}

/// `gpufleet` with test credentials, pointed at `endpoint` by
/// `AWS_ENDPOINT_URL` (none when empty).
fn gpufleet_with(args: &[&str], endpoint: &str, envs: &[(&str, String)]) -> Output {
    command_with(args, endpoint, envs)
        .output()
        .expect("run gpufleet")
}

/// The command [`gpufleet_with`] runs, to spawn.
fn command_with(args: &[&str], endpoint: &str, envs: &[(&str, String)]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_gpufleet"));
    c.args(args)
        .env_remove("GPUFLEET_LOG")
        .env_remove("AWS_ENDPOINT_URL")
        .env_remove("AWS_ENDPOINT_URL_EC2")
        .env_remove("AWS_CONFIG_FILE")
        .envs(envs.iter().map(|(k, v)| (*k, v.clone())))
        .env_remove("AWS_PROFILE")
        .env_remove("AWS_REGION")
        .env("AWS_ACCESS_KEY_ID", "AKIAGPUFLEETCLITEST1")
        .env("AWS_SECRET_ACCESS_KEY", "gpufleet-cli-test-secret")
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .env("GPUFLEET_AWS_PRICE_LIST", "0");
    if !endpoint.is_empty() {
        c.env("AWS_ENDPOINT_URL", endpoint);
    }
    c
}

/// AWS alone in us-east-1, with the config, ledger and home in `dir`.
fn us_east_1_in(dir: &std::path::Path) -> [(&'static str, String); 5] {
    [
        ("GPUFLEET_CLOUDS", "aws".to_string()),
        ("AWS_REGION", "us-east-1".to_string()),
        (
            "GPUFLEET_CONFIG",
            dir.join("gpufleet.toml").display().to_string(),
        ),
        (
            "GPUFLEET_LEDGER",
            dir.join("ledger.sqlite3").display().to_string(),
        ),
        ("HOME", dir.display().to_string()),
    ]
}

fn moto() -> Option<moto::Moto> {
    moto::Moto::start()
}

/// Also run with trace logging: the signed requests are logged, the secret
/// key and the signatures never.
#[test]
fn live_offers_come_from_the_ec2_api_and_no_trace_line_holds_the_secret() {
    let Some(m) = moto() else { return };
    let o = gpufleet_with(
        &words("offers --cloud aws --live --region us-east-1 --gpu A10G:1 --limit 0 -o json"),
        &m.url,
        &[("GPUFLEET_LOG", "trace".into())],
    );
    let rows = support::json_rows(&o);
    assert!(!rows.is_empty());
    // The pools are the API's (its zones and offerings); on-demand prices
    // from the snapshot (Price List off); moto's spot prices are $0.00001
    // placeholders, dropped as implausible with a warning instead of
    // ranking first.
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("dropped an implausible live price"), "{err}");
    assert!(
        err.contains("$0.00001/h is under the plausible floor"),
        "{err}"
    );
    for r in &rows {
        assert_eq!(r["cloud"], "aws");
        assert_eq!(r["region"], "us-east-1");
        assert!(r["zone"].as_str().unwrap().starts_with("use1-az"), "{r}");
        assert!(r["price_per_hour_usd"].as_f64().unwrap() > 0.01, "{r}");
    }
    assert!(err.len() > 10_000, "no TRACE output ({} bytes)", err.len());
    assert!(!err.contains("gpufleet-cli-test-secret"));
    assert!(!err.contains("Signature="));
}

#[test]
fn an_unreachable_api_falls_back_to_the_snapshot_with_a_warning() {
    let port = moto::free_port();
    let o = gpufleet(
        &words("offers --cloud aws --live --region us-east-1 --gpu H100:8 -o json"),
        &format!("http://127.0.0.1:{port}"),
    );
    // The rows are there, from the snapshot; the answer is partial (exit 4).
    assert_eq!(o.status.code(), Some(4));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("warning: the live AWS catalog is unavailable"),
        "{err}"
    );
    let rows: Vec<serde_json::Value> = serde_json::from_slice(&o.stdout).unwrap();
    assert!(!rows.is_empty());
    assert!(rows
        .iter()
        .all(|r| r["source"].as_str().unwrap().starts_with("snapshot:")));
    assert!(!err.contains("gpufleet-cli-test-secret"));
}

#[test]
fn catalog_refresh_writes_a_cache_that_offers_reads_while_fresh() {
    let Some(m) = moto() else { return };
    let dir = support::TempDir::new("cache", "refresh");
    let cache = dir.join("catalog-cache.txt");
    let cfg = dir.join("gpufleet.toml");
    std::fs::write(
        &cfg,
        "clouds = [\"aws\"]\n[aws]\nregions = [\"us-east-1\"]\n",
    )
    .unwrap();
    let envs = [
        ("GPUFLEET_CATALOG_CACHE", cache.display().to_string()),
        ("GPUFLEET_CONFIG", cfg.display().to_string()),
    ];
    let o = gpufleet_with(&["catalog", "refresh"], &m.url, &envs);
    support::ok(&o);
    let text = std::fs::read_to_string(&cache).unwrap();
    assert!(
        text.starts_with("#gpufleet-catalog 1\n#fetched_at "),
        "{}",
        &text[..80]
    );
    // Not a terminal: plain progress lines per region.
    let err = String::from_utf8_lossy(&o.stderr).to_string();
    assert!(err.contains("aws us-east-1: "), "{err}");
    // moto's spot prices are $0.00001 placeholders: dropped, never ranked.
    assert!(err.contains("dropped an implausible live price"), "{err}");
    assert!(text.contains("#fetched aws us-east-1 "));
    let offers = |capacity: &str, extra: &[(&str, String)]| -> Vec<serde_json::Value> {
        let mut all = envs.to_vec();
        all.extend_from_slice(extra);
        let o = gpufleet_with(
            &[
                "offers",
                "--cloud",
                "aws",
                "--gpu",
                "A10G:1",
                "--capacity",
                capacity,
                "--limit",
                "0",
                "-o",
                "json",
            ],
            &m.url,
            &all,
        );
        support::json_rows(&o)
    };
    let source = |r: &serde_json::Value| r["source"].as_str().unwrap_or("").to_string();
    // Mark the cached us-east-1 on-demand price (moto has no on-demand
    // prices: the provider carried the snapshot's) to see where rows come
    // from.
    let marked = text.replace(
        "g5.xlarge,on-demand,1.006000",
        "g5.xlarge,on-demand,0.777000",
    );
    assert_ne!(marked, text, "no cached g5.xlarge on-demand row");
    std::fs::write(&cache, &marked).unwrap();
    let text = marked;
    let fresh = offers("on-demand", &[]);
    // us-east-1 comes from the cache; the regions it did not fetch stay on
    // the embedded snapshot (refreshing one region replaces that region).
    let east: Vec<_> = fresh
        .iter()
        .filter(|r| r["region"] == "us-east-1" && r["instance_type"] == "g5.xlarge")
        .collect();
    assert!(!east.is_empty(), "no us-east-1 rows");
    assert!(east
        .iter()
        .all(|r| r["price_per_hour_usd"].as_f64() == Some(0.777)));
    assert!(
        fresh
            .iter()
            .any(|r| r["region"] == "us-west-2" && source(r).starts_with("snapshot:")),
        "us-west-2 lost its snapshot rows"
    );
    // No placeholder spot price survived into the ranking.
    let spot = offers("spot", &[]);
    assert!(spot
        .iter()
        .all(|r| r["price_per_hour_usd"].as_f64().unwrap() > 0.01));
    assert!(!spot.iter().any(|r| r["region"] == "us-east-1"));
    assert!(text.contains("#fetched aws us-east-1 ") && text.contains(&m.url));
    // Where AWS is reached at its own endpoints, a catalog fetched from a
    // stand-in is not AWS's: the snapshot stands in, and the note says so
    // (moto's catalog used to be read as AWS's until it went stale).
    let o = gpufleet_with(
        &words("offers --cloud aws --gpu A10G:1 --capacity on-demand --limit 0 -o json"),
        "",
        &envs,
    );
    assert!(support::json_rows(&o)
        .iter()
        .all(|r| source(r).starts_with("snapshot:")));
    let o = gpufleet_with(&words("offers --cloud aws --gpu A10G:1"), "", &envs);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains(&format!(
            "the catalog cache's aws (1 region) came from {}, not from where it is reached now",
            m.url
        )),
        "{err}"
    );
    let stale = offers("on-demand", &[("GPUFLEET_CATALOG_MAX_AGE", "1ms".into())]);
    assert!(stale.iter().all(|r| source(r).starts_with("snapshot:")));
    // A failed refresh leaves the cache as it was.
    let port = moto::free_port();
    let o = gpufleet_with(
        &["catalog", "refresh"],
        &format!("http://127.0.0.1:{port}"),
        &envs,
    );
    assert_ne!(o.status.code(), Some(0));
    assert_eq!(std::fs::read_to_string(&cache).unwrap(), text);
}

/// `gpufleet check` on AWS: moto answers STS `GetCallerIdentity`, so the
/// credentials resolve and the identity is shown (the secret never is).
#[test]
fn check_shows_the_aws_identity_behind_the_credentials() {
    let Some(m) = moto() else { return };
    let o = gpufleet_with(
        &["check", "--cloud", "aws", "-o", "json"],
        &m.url,
        &[(
            "HOME",
            support::TempDir::new("home", "check").display().to_string(),
        )],
    );
    let v = support::json(&o);
    let aws = &v[0];
    assert_eq!(aws["usable"], true, "{v}");
    assert!(
        aws["credentials"].as_str().unwrap().contains("AKIA…EST1"),
        "{v}"
    );
    assert!(
        aws["identity"].as_str().unwrap().starts_with("arn:aws:"),
        "{v}"
    );
    assert!(!String::from_utf8_lossy(&o.stdout).contains("gpufleet-cli-test-secret"));
}

/// Pointed at moto the way the AWS CLI is, by `endpoint_url` in the shared
/// config file's profile (no variable): `ls` goes there, and `check` says
/// where the endpoint came from.
#[test]
fn the_aws_profiles_endpoint_url_is_followed_and_shown() {
    let Some(m) = moto() else { return };
    let home = support::TempDir::new("home", "profile-endpoint");
    let config = home.join("aws-config");
    std::fs::write(
        &config,
        format!("[default]\nregion = us-east-1\nendpoint_url = {}\n", m.url),
    )
    .unwrap();
    let envs = [
        ("HOME", home.display().to_string()),
        ("AWS_CONFIG_FILE", config.display().to_string()),
        ("GPUFLEET_CLOUDS", "aws".to_string()),
    ];
    assert!(support::json_rows(&gpufleet_with(&["ls", "-o", "json"], "", &envs)).is_empty());
    let v = support::json(&gpufleet_with(&["check", "-o", "json"], "", &envs));
    assert_eq!(v[0]["usable"], true, "{v}");
    assert_eq!(
        v[0]["endpoints"][0],
        format!("{} (override: endpoint_url in the AWS profile)", m.url)
    );
}

/// An endpoint that accepts connections and never answers: the check gives
/// up within its budget and says so, with no SDK noise.
#[test]
fn check_is_bounded_when_nothing_answers() {
    let hole = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", hole.local_addr().unwrap());
    let started = Instant::now();
    let o = gpufleet_with(
        &["check", "--cloud", "aws", "--timeout", "2s"],
        &url,
        &[(
            "HOME",
            support::TempDir::new("home", "check").display().to_string(),
        )],
    );
    let took = started.elapsed();
    let err = String::from_utf8_lossy(&o.stderr).to_string();
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(took < Duration::from_secs(4), "{took:?}");
    assert!(err.contains("aws: STS did not answer within 2s"), "{err}");
    assert!(!err.contains(" WARN "), "{err}");
    drop(hole);
}

/// `run --detach` while the cloud does not answer: whether a pool can run
/// the job cannot be told now, so the job is recorded for the controller
/// (which places it when the cloud answers), with a warning; it is not
/// refused as unplaceable.
#[test]
fn a_job_submitted_while_the_cloud_is_down_is_recorded_with_a_warning() {
    let dir = support::TempDir::new("live-aws", "down");
    std::fs::write(
        dir.join("job.toml"),
        "name = \"down\"\nhours = 2\nclouds = [\"aws\"]\nregions = [\"us-east-1\"]\nimage = \"ami-0123456789abcdef0\"\n[[gpu]]\nmodel = \"A10G\"\ncount = 1\n",
    )
    .unwrap();
    let ledger = dir.join("ledger.sqlite3").display().to_string();
    let envs = [
        (
            "GPUFLEET_CONFIG",
            dir.join("gpufleet.toml").display().to_string(),
        ),
        ("GPUFLEET_LEDGER", ledger),
        ("GPUFLEET_CLOUDS", "aws".to_string()),
        ("GPUFLEET_AWS_REGIONS", "us-east-1".to_string()),
        ("HOME", dir.display().to_string()),
    ];
    let job = dir.join("job.toml").display().to_string();
    let o = gpufleet_with(
        &["run", "--job", &job, "--detach", "-o", "json"],
        "http://127.0.0.1:9",
        &envs,
    );
    let out = support::json(&o);
    let warned = support::stderr(&o);
    assert!(
        warned.contains("cannot tell now whether a pool can run job down-"),
        "{warned}"
    );
    assert_eq!(out["state"], "placing", "{out}");
    let rows = support::json_rows(&gpufleet_with(&["jobs", "ls", "-o", "json"], "", &envs));
    assert_eq!(rows.len(), 1, "{rows:?}");
}

/// Launch, `ls` and `terminate` on moto_server's EC2: the job does not start
/// on moto's $0.00001 placeholder spot prices (dropped as implausible, as
/// `offers --live` drops them); an instance is terminated by the id EC2's
/// console shows (`i-…`, without gpufleet's region prefix); and a cloud
/// whose placement groups cannot be listed (moto answers
/// DescribePlacementGroups with HTTP 500) does not hide what was terminated.
#[test]
fn launch_and_terminate_on_the_ec2_api() {
    let Some(m) = moto() else { return };
    let dir = support::TempDir::new("live-aws", "terminate");
    let envs = us_east_1_in(&dir);
    let run = |args: &str| gpufleet_with(&words(args), &m.url, &envs);
    for job in ["one", "two"] {
        let o = run(&format!(
            "launch --gpu A10G:1 --hours 2 --region us-east-1 --image ami-12c6146b --name {job} -o json"
        ));
        let v = support::json(&o);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains("implausible live prices dropped"), "{err}");
        let row = &v["instances"][0];
        assert!(row["price_per_hour_usd"].as_f64().unwrap() > 0.1, "{v}");
    }
    // Asked for by hand, a pool at a placeholder price is refused saying so
    // (not "no pool … among the offers"), before anything is launched.
    let o = run(
        "launch --pool aws:us-east-1/use1-az1:g5.xlarge:spot --image ami-12c6146b --name pinned",
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("its live price is not one to trust") && err.contains("$0.00001/h"),
        "{err}"
    );
    let rows = support::json_rows(&run("ls -o json"));
    assert_eq!(rows.len(), 2, "{rows:?}");
    let id_of = |job: &str| {
        rows.iter().find(|r| r["job"] == job).unwrap()["id"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let (one, two) = (id_of("one"), id_of("two"));
    let native = one.split_once('/').unwrap().1;
    assert!(native.starts_with("i-"), "{one}");
    // Only the victims' own groups go with them, and it was in none: none
    // is looked for.
    let o = run(&format!("terminate {native} --yes -o json"));
    let v = support::json(&o);
    assert_eq!(v["terminated"], serde_json::json!([one]), "{v}");
    assert_eq!(v["groups_unchecked"], serde_json::json!([]), "{v}");
    // A bare id no instance has says what ids look like.
    let o = run("terminate i-0000000000000000f --yes");
    assert_eq!(o.status.code(), Some(3));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("look like us-east-1/i-0abc"), "{err}");
    // By job: the job's groups are looked for, and moto cannot list them.
    let o = run("terminate --job two --yes");
    assert_eq!(o.status.code(), Some(0));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains(&format!("terminated {two}")), "{out}");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("aws placement groups were not listed") && err.contains("reap --yes"),
        "{err}"
    );
    let live: Vec<_> = support::json_rows(&run("ls -o json"))
        .into_iter()
        .filter(|r| r["state"] != "terminated" && r["state"] != "shutting-down")
        .collect();
    assert!(live.is_empty(), "{live:?}");
}

/// A job file's `[access.aws] subnet` decides the zone (issue 79): asked
/// for a pool in another zone, the instance starts in the subnet's, and
/// what is recorded (the launch's pool, the job's record, the ledger of
/// spend) is where it is, not the pool asked for.
#[test]
fn the_recorded_pool_is_the_instances_own_zone() {
    let Some(m) = moto() else { return };
    let dir = support::TempDir::new("live-aws", "subnet");
    let envs = us_east_1_in(&dir);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (subnet, zone) = rt.block_on(gpufleet_testkit::aws::loopback_subnet(&m.url));
    let other = if zone == "use1-az1" {
        "use1-az2"
    } else {
        "use1-az1"
    };
    let job = dir.join("job.toml");
    std::fs::write(
        &job,
        format!("name = \"sub\"\nhours = 1\n[[gpu]]\nmodel = \"A10G\"\n[access.aws]\nsubnet = \"{subnet}\"\n"),
    )
    .unwrap();
    let o = gpufleet_with(
        &[
            "launch",
            "--job",
            job.to_str().unwrap(),
            "--pool",
            &format!("aws:us-east-1/{other}:g5.xlarge:on-demand"),
            "--image",
            "ami-12c6146b",
            "-o",
            "json",
        ],
        &m.url,
        &envs,
    );
    let v = support::json(&o);
    assert_eq!(v["instances"][0]["zone"], zone.as_str(), "{v}");
    assert!(v["pool"].as_str().unwrap().contains(&zone), "{v}");
    let show = support::json(&gpufleet_with(
        &words("jobs show sub -o json"),
        &m.url,
        &envs,
    ));
    assert!(
        show["job"]["pool"].as_str().unwrap().contains(&zone),
        "{show}"
    );
    let costs = support::json(&gpufleet_with(
        &words("costs --by job -o json"),
        &m.url,
        &envs,
    ));
    assert_eq!(costs["total"]["instances"], 1, "{costs}");
}

/// One placer on the EC2 API: for the same job, `place --live` (moto's
/// offers and stability signals, as the executor reads them) chooses the
/// pool `launch` then starts in.
#[test]
fn place_live_chooses_where_launch_starts_on_the_ec2_api() {
    let Some(m) = moto() else { return };
    let dir = support::TempDir::new("live-aws", "agree");
    let envs = us_east_1_in(&dir);
    let run = |args: &str| gpufleet_with(&words(args), &m.url, &envs);
    let job = "--gpu A10G:1 --hours 2 --region us-east-1";
    let rows = support::json_rows(&run(&format!("place {job} --live -o json")));
    let chosen: Vec<&serde_json::Value> = rows.iter().filter(|r| r["chosen"] == true).collect();
    assert_eq!(chosen.len(), 1, "{rows:?}");
    let c = chosen[0];
    let o = run(&format!(
        "launch {job} --image ami-12c6146b --name agree -o json"
    ));
    let v = support::json(&o);
    let got = &v["instances"][0];
    for key in ["cloud", "region", "zone", "instance_type", "capacity"] {
        assert_eq!(got[key], c[key], "{key}: launched {v}, chosen {c}");
    }
    run("terminate --job agree --yes");
}

/// Issue 63: a controller extends the expiry of what it drives (EC2
/// CreateTags), so the instance of a `run` killed -9 is past its expiry
/// within the lease and two polls, and `reap --yes` terminates it then (not
/// after an idle window); before that, `reap` leaves it alone.
#[test]
fn a_killed_controllers_instance_is_reaped_once_its_expiry_passes() {
    let Some(m) = moto() else { return };
    let dir = support::TempDir::new("live-aws", "orphan");
    std::fs::write(
        dir.join("job.toml"),
        "name = \"orphan\"\nhours = 2\nclouds = [\"aws\"]\nregions = [\"us-east-1\"]\nimage = \"ami-12c6146b\"\n[[gpu]]\nmodel = \"A10G\"\ncount = 1\n",
    )
    .unwrap();
    let envs = us_east_1_in(&dir);
    let run = |args: &str| gpufleet_with(&words(args), &m.url, &envs);
    let job = dir.join("job.toml").display().to_string();
    let mut ctl = Command::new(env!("CARGO_BIN_EXE_gpufleet"));
    ctl.args(["run", "--job", &job, "--poll", "1s", "--lease", "3s"])
        .envs(envs.iter().map(|(k, v)| (*k, v.clone())))
        .env("AWS_ENDPOINT_URL", &m.url)
        .env("AWS_ACCESS_KEY_ID", "AKIAGPUFLEETCLITEST1")
        .env("AWS_SECRET_ACCESS_KEY", "gpufleet-cli-test-secret")
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .env("GPUFLEET_AWS_PRICE_LIST", "0")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    let mut child = ctl.spawn().unwrap();
    // Wait until the controller has brought the launch's allowance (20 min)
    // down to its window (3 s + 2 × 1 s).
    let started = Instant::now();
    let extended = loop {
        let rows = support::json_rows(&run("ls -o json"));
        let soon = rows.iter().find(|r| {
            r["expires_at"]
                .as_str()
                .and_then(|t| {
                    time::OffsetDateTime::parse(t, &time::format_description::well_known::Rfc3339)
                        .ok()
                })
                .is_some_and(|t| t < time::OffsetDateTime::now_utc() + time::Duration::minutes(1))
        });
        if let Some(r) = soon {
            break r["id"].as_str().unwrap().to_string();
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the expiry was never extended: {rows:?}"
        );
        std::thread::sleep(Duration::from_millis(300));
    };
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    // Right after the kill: not expired yet (or driven), so not reaped.
    let o = run("reap -o json");
    let v = support::json(&o);
    assert!(
        v["candidates"].as_array().is_some_and(|a| a.is_empty()),
        "reaped before its expiry: {v}"
    );
    std::thread::sleep(Duration::from_secs(7));
    let o = run("reap --yes -o json");
    let v = support::json(&o);
    assert_eq!(v["terminated"], serde_json::json!([extended]), "{v}");
    assert!(
        v["candidates"][0]["reason"]
            .as_str()
            .is_some_and(|r| r.contains("expired")),
        "{v}"
    );
}

/// `--provider live serve --service FILE --listen LISTEN`.
fn serve_args<'a>(file: &'a std::path::Path, listen: &'a str) -> [&'a str; 7] {
    [
        "--provider",
        "live",
        "serve",
        "--service",
        file.to_str().unwrap(),
        "--listen",
        listen,
    ]
}

/// A server standing in for a replica's on its instance's address: answers
/// every request 200 with `replica` until `stop` is set.
fn stand_in_replica(
    addr: std::net::SocketAddr,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> std::thread::JoinHandle<usize> {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind(addr).unwrap();
    listener.set_nonblocking(true).unwrap();
    std::thread::spawn(move || {
        let mut served = 0;
        while !stop.load(std::sync::atomic::Ordering::Acquire) {
            match listener.accept() {
                Ok((mut s, _)) => {
                    s.set_nonblocking(false).unwrap();
                    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
                    let mut buf = [0u8; 4096];
                    let _ = s.read(&mut buf);
                    let _ = s.write_all(
                        b"HTTP/1.1 200 OK\r\nContent-Length: 7\r\nConnection: close\r\n\r\nreplica",
                    );
                    served += 1;
                }
                Err(_) => std::thread::sleep(Duration::from_millis(20)),
            }
        }
        served
    })
}

/// `gpufleet --provider live serve` on EC2 (moto): the replica is launched
/// into the service file's subnet, whose addresses moto gives on the
/// loopback network; the test serves on the instance's private address in
/// its place; the proxy probes it there, routes to it, and `serve down`
/// terminates the instance.
#[test]
fn serve_on_ec2_reaches_its_replica_at_the_instances_private_address() {
    use std::io::{BufRead, BufReader, Read, Write};
    let Some(m) = moto() else { return };
    let (subnet, zone) = tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(gpufleet_testkit::aws::loopback_subnet(&m.url));
    let dir = support::TempDir::new("live-aws", "serve");
    let envs = us_east_1_in(&dir);
    let port = gpufleet_testkit::aws::moto::free_port();
    let listen = format!("127.0.0.1:{}", gpufleet_testkit::aws::moto::free_port());
    let file = dir.join("llm.toml");
    std::fs::write(
        &file,
        format!(
            r#"name = "llm"
run = "vllm serve --port $PORT"
port = {port}
image = "ami-12c6146b"
clouds = ["aws"]
regions = ["us-east-1"]
zones = ["{zone}"]
readiness = "/health"

[access.aws]
subnet = "{subnet}"

[[gpu]]
model = "A10G"

[replicas]
min = 1
max = 1

[spot]
share = 0.0
extra = 0
"#
        ),
    )
    .unwrap();
    let mut serve = command_with(&serve_args(&file, &listen), &m.url, &envs)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(serve.stderr.take().unwrap()).lines();
    // The replica's instance, and its address in the subnet.
    let started = Instant::now();
    let ip = loop {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "no replica launched"
        );
        let ls = support::json(&gpufleet_with(&["ls", "-o", "json"], &m.url, &envs));
        let found = ls.as_array().unwrap().iter().find_map(|i| {
            (i["job"].is_null() && i["state"] == "running")
                .then(|| i["private_ip"].as_str().map(str::to_string))
                .flatten()
        });
        if let Some(ip) = found {
            break ip;
        }
        std::thread::sleep(Duration::from_millis(500));
    };
    assert!(ip.starts_with("127.0.10."), "{ip}");
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let replica = stand_in_replica(format!("{ip}:{port}").parse().unwrap(), stop.clone());
    let mut seen = Vec::new();
    loop {
        match lines.next() {
            Some(Ok(l)) if l.contains("ready 1") => break,
            Some(Ok(l)) => seen.push(l),
            _ => panic!("serve ended before its replica was ready: {seen:#?}"),
        }
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "not ready: {seen:#?}"
        );
    }
    let mut s = std::net::TcpStream::connect(&listen).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(
        s,
        "GET /generate HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut answer = String::new();
    s.read_to_string(&mut answer).unwrap();
    assert!(
        answer.starts_with("HTTP/1.1 200") && answer.ends_with("replica"),
        "{answer}"
    );
    // The replica's record says where it was reached.
    let status = support::json(&gpufleet_with(
        &["--provider", "live", "serve", "status", "llm", "-o", "json"],
        &m.url,
        &envs,
    ));
    let endpoint = format!("{ip}:{port}");
    assert!(
        status["replicas"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["endpoint"] == endpoint.as_str() && r["state"] == "ready"),
        "{status:#}"
    );
    let down = gpufleet_with(
        &["--provider", "live", "serve", "down", "llm"],
        &m.url,
        &envs,
    );
    assert_eq!(
        down.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&down.stderr)
    );
    assert_eq!(serve.wait().unwrap().code(), Some(0));
    stop.store(true, std::sync::atomic::Ordering::Release);
    assert!(replica.join().unwrap() >= 2, "probed and asked");
    let ls = support::json(&gpufleet_with(&["ls", "-o", "json"], &m.url, &envs));
    assert!(
        ls.as_array()
            .unwrap()
            .iter()
            .all(|i| i["private_ip"] != ip.as_str()),
        "the replica's instance is terminated: {ls:#}"
    );
}

/// A service file with no image for any cloud opened could never start a
/// replica: refused before anything starts, naming what to add.
#[test]
fn serve_without_an_image_for_the_clouds_is_refused() {
    let Some(m) = moto() else { return };
    let dir = support::TempDir::new("live-aws", "serve-image");
    let envs = us_east_1_in(&dir);
    let file = dir.join("llm.toml");
    std::fs::write(
        &file,
        "name = \"llm\"\nrun = \"vllm serve\"\nreadiness = \"/health\"\n[[gpu]]\nmodel = \"A10G\"\n",
    )
    .unwrap();
    let listen = format!("127.0.0.1:{}", gpufleet_testkit::aws::moto::free_port());
    let o = gpufleet_with(&serve_args(&file, &listen), &m.url, &envs);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("service llm has no image for aws: add image = "),
        "{err}"
    );
    let ls = support::json(&gpufleet_with(&["ls", "-o", "json"], &m.url, &envs));
    assert_eq!(ls.as_array().unwrap().len(), 0, "{ls:#}");
}
