//! Bad input found by the adversarial passes of issue 78, each refused
//! before anything starts (exit 2, naming the value and what is valid,
//! nothing recorded or launched).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use support::{stderr as err, FakeEnv};

use crate::support;

const NOW: &str = "2026-01-05T00:00:00Z";

fn service_file(env: &FakeEnv, extra_top: &str) -> std::path::PathBuf {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../examples/services/echo.toml"
    ))
    .unwrap();
    let (top, rest) = text.split_once("\n[[gpu]]").unwrap();
    let path = env.dir.join("svc.toml");
    std::fs::write(&path, format!("{top}\n{extra_top}\n[[gpu]]{rest}")).unwrap();
    path
}

/// A service file's regions and zones are checked as a job file's are (an
/// unknown region used to leave "target 1, ready 0" for ever), and so is
/// the size of its replicas' boot script (50,000 env keys used to fail
/// every launch and set each pool aside).
#[test]
fn a_service_file_with_unknown_regions_or_a_script_too_long_is_refused() {
    let env = FakeEnv::new("refuse", "svc");
    for (extra, needle) in [
        ("regions = [\"../../etc\"]", "../../etc"),
        ("zones = [\"us-east-1z\"]", "us-east-1z"),
    ] {
        let path = service_file(&env, extra);
        let o = env
            .local(&[
                "serve",
                "--service",
                path.to_str().unwrap(),
                "--listen",
                "127.0.0.1:0",
            ])
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(2), "{extra}: {}", err(&o));
        assert!(
            err(&o).contains(needle) && err(&o).contains("svc.toml"),
            "{}",
            err(&o)
        );
    }
    let keys: String = (0..2_000).map(|i| format!("K{i} = \"v{i}\"\n")).collect();
    let text = std::fs::read_to_string(service_file(&env, "")).unwrap();
    let path = env.dir.join("big.toml");
    std::fs::write(&path, format!("{text}\n[env]\n{keys}")).unwrap();
    let o = env
        .local(&[
            "serve",
            "--service",
            path.to_str().unwrap(),
            "--listen",
            "127.0.0.1:0",
        ])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", err(&o));
    assert!(
        err(&o).contains("byte limit of the clouds' user data"),
        "{}",
        err(&o)
    );
}

/// A job whose boot script no cloud would take (a 133 KB `run`) is refused
/// at submit, not by 120 launches; nothing is recorded.
#[test]
fn a_job_whose_boot_script_is_too_long_is_refused_at_submit() {
    let env = FakeEnv::new("refuse", "job");
    let run = "echo x; ".repeat(17_000);
    let job = env.dir.join("job.toml");
    std::fs::write(
        &job,
        format!("name = \"big\"\nhours = 1\nrun = \"{run}\"\n[[gpu]]\nmodel = \"A10G\"\n"),
    )
    .unwrap();
    let o = env.run_at(
        NOW,
        &["run", "--job", job.to_str().unwrap(), "--detach"],
        None,
    );
    assert_eq!(o.status.code(), Some(2), "{}", err(&o));
    assert!(err(&o).contains("over the 16384 byte limit"), "{}", err(&o));
    let ls = env.run_at(NOW, &["jobs", "ls", "-o", "json"], None);
    assert!(
        !String::from_utf8_lossy(&ls.stdout).contains("big"),
        "recorded anyway"
    );
    // The same at `launch --job`.
    let o = env.run_at(
        NOW,
        &["launch", "--job", job.to_str().unwrap(), "--image", "img"],
        None,
    );
    assert_eq!(o.status.code(), Some(2), "{}", err(&o));
    assert!(err(&o).contains("over the 16384 byte limit"), "{}", err(&o));
    // An env name the boot script or the shell owns: refused by name.
    for name in ["IFS", "GPUFLEET_CLOUD", "BASH_ENV"] {
        std::fs::write(
            &job,
            format!("name = \"n\"\nhours = 1\nrun = \"true\"\nenv = {{ {name} = \"x\" }}\n[[gpu]]\nmodel = \"A10G\"\n"),
        )
        .unwrap();
        let o = env.run_at(
            NOW,
            &["run", "--job", job.to_str().unwrap(), "--detach"],
            None,
        );
        assert_eq!(o.status.code(), Some(2), "{name}: {}", err(&o));
        assert!(err(&o).contains(&format!("'{name}'")), "{}", err(&o));
    }
    // An endless job file: refused naming the limit.
    let o = env.run_at(NOW, &["run", "--job", "/dev/zero", "--detach"], None);
    assert_eq!(o.status.code(), Some(2), "{}", err(&o));
    assert!(err(&o).contains("is over 1048576 bytes"), "{}", err(&o));
}
