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

/// `[secrets]`: every reference form of the three stores read into its
/// parts, written back the same; a job placed only where every secret has a
/// reference; and each bad reference named with what would be valid.
#[test]
fn secrets_are_references_by_cloud() {
    let spec = JobSpec::from_toml(
        r#"
        hours = 1
        run = "python train.py"
        env = { EPOCHS = "3" }
        [[gpu]]
        model = "T4"
        [secrets]
        WANDB_API_KEY = { aws = "arn:aws:secretsmanager:us-west-2:123456789012:secret:wandb-AbCdEf", gcp = "projects/ml-prod/secrets/wandb/versions/3", azure = "https://ml-kv.vault.azure.net/secrets/wandb" }
        HF_TOKEN = { aws = "ssm:/ml/hf-token", gcp = "projects/ml-prod/secrets/hf_token", azure = "https://ml-kv.vault.azure.net/secrets/hf-token/0123456789abcdef0123456789abcdef" }
        "#,
    )
    .unwrap();
    assert_eq!(spec.clouds, vec![Cloud::Aws, Cloud::Gcp, Cloud::Azure]);
    let wandb = &spec.workload.secrets["WANDB_API_KEY"];
    assert_eq!(
        wandb[&Cloud::Aws],
        SecretRef::AwsSecretsManager {
            secret_id: "arn:aws:secretsmanager:us-west-2:123456789012:secret:wandb-AbCdEf".into(),
            region: Some("us-west-2".into())
        }
    );
    assert_eq!(
        wandb[&Cloud::Gcp],
        SecretRef::GcpSecretManager {
            project: "ml-prod".into(),
            secret: "wandb".into(),
            version: "3".into()
        }
    );
    let hf = &spec.workload.secrets["HF_TOKEN"];
    assert_eq!(
        hf[&Cloud::Aws],
        SecretRef::AwsSsm {
            name: "/ml/hf-token".into(),
            region: None
        }
    );
    assert_eq!(
        hf[&Cloud::Gcp].to_string(),
        "projects/ml-prod/secrets/hf_token/versions/latest"
    );
    assert_eq!(
        hf[&Cloud::Azure],
        SecretRef::AzureKeyVault {
            vault: "https://ml-kv.vault.azure.net".into(),
            name: "hf-token".into(),
            version: Some("0123456789abcdef0123456789abcdef".into())
        }
    );
    for text in [
        "arn:aws:secretsmanager:us-west-2:123456789012:secret:wandb-AbCdEf",
        "secretsmanager:team/wandb",
        "arn:aws-us-gov:ssm:us-gov-west-1:123456789012:parameter/ml/hf",
        "ssm:hf",
        "projects/p-1/secrets/s/versions/latest",
        "https://kv-1.vault.usgovcloudapi.net/secrets/s-1",
        "fake:token",
    ] {
        let r: SecretRef = text.parse().unwrap();
        assert_eq!(r.to_string(), text);
        assert_eq!(r.to_string().parse::<SecretRef>().unwrap(), r);
    }

    // One reference alone: the job runs where it can be read.
    let one = JobSpec::from_toml(
        "hours = 1\nrun = \"x\"\n[[gpu]]\nmodel = \"T4\"\n[secrets]\nHF_TOKEN = \"ssm:/ml/hf\"\n",
    )
    .unwrap();
    assert_eq!(one.clouds, vec![Cloud::Aws]);

    let bad = |secrets: &str, clouds: &str| {
        JobSpec::from_toml(&format!(
            "hours = 1\nrun = \"x\"\n{clouds}\n[[gpu]]\nmodel = \"T4\"\n[secrets]\n{secrets}\n"
        ))
        .unwrap_err()
        .to_string()
    };
    for (secrets, clouds, needle) in [
        (
            r#"K = "vault:x""#,
            "",
            "invalid secret reference \"vault:x\"",
        ),
        (r#"K = "ssm:a b""#, "", "a parameter name is letters"),
        (
            r#"K = "arn:aws:s3:us-east-1:123456789012:bucket""#,
            "",
            "secretsmanager or ssm",
        ),
        (
            r#"K = "arn:aws:secretsmanager:us-east-1:1234:secret:x""#,
            "",
            "12 digits",
        ),
        (
            r#"K = "https://evil.example.com/secrets/x""#,
            "",
            ".vault.azure.net",
        ),
        (
            r#"K = "https://kv-1.vault.azure.net/secrets/x/notaversion""#,
            "",
            "32 hexadecimal digits",
        ),
        (
            r#"K = "projects/p/secrets/s/versions/""#,
            "",
            "a version is a number or latest",
        ),
        (
            r#"K = { gcp = "ssm:/x" }"#,
            "",
            "K.gcp: ssm:/x is a secret in AWS Systems Manager Parameter Store, not in GCP",
        ),
        (r#"K = { mars = "ssm:/x" }"#, "", "unknown cloud 'mars'"),
        (r#"K = {}"#, "", "at least one of aws, gcp, azure"),
        (r#"1K = "ssm:/x""#, "", "invalid secret name '1K'"),
        (r#"GPUFLEET_X = "ssm:/x""#, "", "gpufleet's own"),
        (
            r#"EPOCHS = "ssm:/x""#,
            "env = { EPOCHS = \"3\" }",
            "EPOCHS is both in env and in [secrets]",
        ),
        (
            r#"K = "ssm:/x""#,
            "clouds = [\"aws\", \"gcp\"]",
            "no gcp reference for K",
        ),
        (
            "A = \"ssm:/x\"\nB = \"projects/p/secrets/b\"",
            "",
            "no cloud has a reference for every secret (A in aws; B in gcp)",
        ),
    ] {
        let e = bad(secrets, clouds);
        assert!(e.contains(needle), "{secrets}: {e}");
    }
}

/// The names a job may not set in `env` or `[secrets]` (the shell's, the
/// node's and gpufleet's own) are refused naming the name and why; names
/// the boot script once used for itself (`name`, `v`, `D`, ...) and `PATH`
/// are a job's to set.
#[test]
fn reserved_env_and_secret_names_are_refused_by_name() {
    let job = |table: &str, line: &str| {
        JobSpec::from_toml(&format!(
            "hours = 1\nrun = \"true\"\n[[gpu]]\nmodel = \"T4\"\n[{table}]\n{line}\n"
        ))
    };
    for name in [
        "IFS",
        "BASH_ENV",
        "BASH_XTRACEFD",
        "ENV",
        "PS4",
        "HOME",
        "SHELLOPTS",
        "GPUFLEET_CLOUD",
        "GPUFLEET_JOB_ID",
        "_gf_d",
        "_GF_U",
    ] {
        for (table, value) in [("env", "\"x\""), ("secrets", "\"ssm:/x\"")] {
            let e = job(table, &format!("{name} = {value}"))
                .err()
                .unwrap_or_else(|| panic!("{table} {name} accepted"));
            assert_eq!(e.kind(), crate::ErrorKind::InvalidInput);
            assert!(
                e.message().contains(&format!("name '{name}'")),
                "{table} {name}: {e}"
            );
        }
    }
    for name in [
        "name",
        "v",
        "key",
        "ref",
        "doc",
        "try",
        "depth",
        "D",
        "U",
        "H",
        "PATH",
        "LD_LIBRARY_PATH",
    ] {
        job("env", &format!("{name} = \"x\"")).unwrap_or_else(|e| panic!("env {name}: {e}"));
        if name != "PATH" {
            job("secrets", &format!("{name} = \"ssm:/x\""))
                .unwrap_or_else(|e| panic!("secret {name}: {e}"));
        }
    }
}

/// A job file is checked as every front end checks it: values, clouds,
/// regions and zones against the catalog, each error naming the file.
#[test]
fn a_checked_job_file_names_the_file_and_what_is_wrong() {
    let snapshot = crate::catalog::Snapshot::embedded();
    let file = |extra: &str| {
        JobFile::from_toml(&format!(
            "name = \"x\"\nhours = 2\n{extra}\n[[gpu]]\nmodel = \"A10G\"\n"
        ))
        .expect("file")
    };
    let spec = file("clouds = [\"aws\"]\nregions = [\"us-east-1\"]")
        .checked_spec(snapshot, "job.toml")
        .expect("a good file");
    assert_eq!(spec.regions.len(), 1);
    for (extra, needle) in [
        ("clouds = [\"fake\"]", "job.toml: unknown cloud 'fake'"),
        (
            "regions = [\"us-east-9\"]",
            "job.toml: unknown region 'us-east-9'",
        ),
        (
            "clouds = [\"aws\"]\nregions = [\"us-east-1\"]\nzones = [\"us-east-1a\"]",
            "AWS zones are named by AZ ID",
        ),
        ("zones = [\"mars-1a\"]", "job.toml: unknown zone 'mars-1a'"),
    ] {
        let e = file(extra)
            .checked_spec(snapshot, "job.toml")
            .expect_err(extra)
            .to_string();
        assert!(e.contains(needle), "{extra}: {e}");
    }
    // A bad value: the file and the key.
    let negative = JobFile::from_toml("hours = -2\n[[gpu]]\nmodel = \"A10G\"\n").expect("file");
    let e = negative
        .checked_spec(snapshot, "job.toml")
        .expect_err("negative hours")
        .to_string();
    assert!(e.starts_with("job.toml: ") && e.contains("hours"), "{e}");
}
