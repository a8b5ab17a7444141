use super::*;

#[test]
fn reads_toml_and_json() {
    let spec = JobSpec::from_toml(
        r#"
        name = "ft"
        hours = 20
        checkpoint_interval = "30m"
        deadline = "48h"
        budget = "900"
        clouds = ["aws", "gcp"]
        [[gpu]]
        model = "h100"
        count = 8
        [[gpu]]
        model = "A100-80GB"
        count = 8
        [throughput]
        L4 = 0.9
        "#,
    )
    .unwrap();
    assert_eq!(spec.gpus.len(), 2);
    assert_eq!(
        spec.checkpoint_interval,
        CheckpointInterval::Every(Duration::from_secs(1800))
    );
    assert_eq!(spec.budget, Some(Money::from_cents(90_000)));
    assert_eq!(spec.throughput.factor(&GpuModel::L4), Some(0.9));
    // 8xA100-80GB needs 4.417/2.635 as long as 8xH100.
    let h = spec.work_hours_on(&GpuModel::A100_80GB, 8).unwrap();
    assert!((h - 20.0 * 4.417 / 2.635).abs() < 1e-9);
    let json =
        JobSpec::from_json(r#"{"hours": 3, "gpu": [{"model": "T4"}], "budget": 12.5}"#).unwrap();
    assert_eq!(json.budget, Some(Money::from_cents(1250)));
    assert_eq!(json.work_hours_on(&GpuModel::T4, 1), Some(3.0));
    assert_eq!(
        json.work_hours_on(&GpuModel::L4, 1),
        None,
        "no default factor for T4 or L4"
    );
}

#[test]
fn bad_files_name_the_problem() {
    let cases = [
        (
            r#"name = "  "
hours = 1
[[gpu]]
model = "H100""#,
            "invalid job name \"  \" (2 characters): expected 1 to 256 characters, not all blank",
        ),
        (
            r#"name = "a\nb"
hours = 1
[[gpu]]
model = "H100""#,
            "invalid job name \"a\\nb\"",
        ),
        (
            r#"hours = 0
[[gpu]]
model = "H100""#,
            "invalid hours 0",
        ),
        (
            r#"hours = 1
[[gpu]]
model = "H10""#,
            "unknown GPU model 'H10'",
        ),
        (
            r#"hours = 1
deadline = "soon"
[[gpu]]
model = "H100""#,
            "deadline: invalid duration 'soon'",
        ),
        (
            r#"hours = 1
[[gpu]]
model = "H100"
count = 64"#,
            "invalid GPU count 64",
        ),
        (
            r#"hours = 1
gpus = 3"#,
            // Where: the line and its text (the message alone named neither).
            "line 2 (gpus = 3): unknown field `gpus`",
        ),
        (
            "name = \"a\"\nhours = \"x\"",
            "line 2 (hours = \"x\"): invalid type: string \"x\"",
        ),
        ("hours = 1\ngpu = []", "at least one GPU option"),
        (
            r#"hours = 1
clouds = ["ibm"]
[[gpu]]
model = "H100""#,
            "unknown cloud 'ibm'",
        ),
        (
            "hours = 1\nbudget = -5\n[[gpu]]\nmodel = \"H100\"",
            "invalid budget '-5.00': expected a positive amount",
        ),
    ];
    for (text, needle) in cases {
        let e = JobSpec::from_toml(text).unwrap_err();
        assert!(e.to_string().contains(needle), "{text}: {e}");
        assert_eq!(e.kind(), crate::ErrorKind::InvalidInput);
    }
}

#[test]
fn job_names_are_shown_text() {
    assert!(check_job_name("train-42").is_ok());
    assert!(check_job_name("Llama 70B fine-tune, run 3 (ünïcode)").is_ok());
    assert!(check_job_name(&"x".repeat(MAX_JOB_NAME_CHARS)).is_ok());
    let long = check_job_name(&"x".repeat(MAX_JOB_NAME_CHARS + 1)).unwrap_err();
    assert!(
        long.message().contains("\"... (257 characters)"),
        "{}",
        long.message()
    );
    for bad in ["", " \t ", "tab\there", "bell\u{7}"] {
        assert!(check_job_name(bad).is_err(), "{bad:?}");
    }
    // Checked where a name comes in: a file read from text, the builder ...
    let blank = "name = \"\"\nhours = 1\n[[gpu]]\nmodel = \"H100\"";
    assert!(JobFile::from_toml(blank).is_err());
    assert!(
        JobFile::from_json(r#"{"name": " ", "hours": 1, "gpu": [{"model": "H100"}]}"#).is_err()
    );
    assert!(JobSpec::builder(" ", GpuModel::H100, 8, 1.0)
        .build()
        .is_err());
    // ... but a file already recorded with such a name (before the check)
    // still becomes a spec, so its job can be driven and cancelled.
    let stored: JobFile =
        serde_json::from_str(r#"{"name": "", "hours": 1, "gpu": [{"model": "H100"}]}"#).unwrap();
    assert_eq!(stored.into_spec().unwrap().name, "");
}
