//! The boot script: what a managed job's instance runs at first boot.
//!
//! The script is plain `bash` and is the same on every cloud apart from how
//! the node reports: it installs the SSH key, exports the job's environment,
//! runs `setup`, starts `gpufleet watch --on-notice <hook>` beside the job
//! (when `gpufleet` is on the image; otherwise it polls the metadata service
//! for the notice itself, with curl, and runs the hook once) and the job
//! itself, and reports on its
//! instance's own tags (labels on GCP), with the instance's own identity:
//!
//! | tag                  | value                                     |
//! |----------------------|-------------------------------------------|
//! | `gpufleet:heartbeat` | Unix seconds, every 60 s                  |
//! | `gpufleet:progress`  | thousandths of the work done, read from `$GPUFLEET_PROGRESS_FILE` (the job writes a fraction such as `0.42` there) |
//! | `gpufleet:notice`    | Unix seconds, when the watch agent saw an interruption notice |
//! | `gpufleet:exit`      | the exit status of `setup` or `run`       |
//! | `gpufleet:gpu`, `gpufleet:gpu-quiet` | what the GPUs did lately, from the watch agent's samples (see `gpufleet_core::usage`) |
//!
//! Reporting uses the aws CLI where the image has it (the Deep Learning
//! AMIs) and otherwise EC2's CreateTags signed by `curl` 7.75+ itself
//! (`--aws-sigv4`) with the instance profile's credentials from IMDS;
//! `gcloud` where a Compute Engine image has it, otherwise the Compute API's
//! `setLabels` with the service account's token from the metadata server;
//! and on Azure the Resource Manager's tags API through IMDS and `curl`
//! (the az CLI is on few images). The identity the node needs (`ec2:CreateTags` on
//! itself, `compute.instances.setLabels`, `Microsoft.Resources/tags/write`
//! as in Tag Contributor) comes from the job file's `identity`. A node that
//! cannot report sends no heartbeat, and the controller treats it as a job
//! that never started once its boot grace has passed (`--boot-grace`; `0s`
//! turns that off, and progress is then estimated from run time and the
//! checkpoint interval).

use gpufleet_core::placer::Workload;
use gpufleet_core::{fnv1a64, Cloud, Error, LaunchRequest, Result};

mod node;
mod secrets;
pub(crate) use self::node::node_side;
use self::secrets::secret_reads;
pub use self::secrets::SECRETS_EXIT;

/// Where the boot script keeps its files on the node.
pub const NODE_DIR: &str = "/var/lib/gpufleet";

/// Sets `U` and `H` to the login user and its home: the first regular
/// account (ubuntu, ec2-user, azureuser), else root.
const LOGIN_USER: &str = "_gf_u=$(getent passwd 1000 | cut -d: -f1); _gf_u=${_gf_u:-root}; _gf_h=$(getent passwd \"$_gf_u\" | cut -d: -f6); _gf_h=${_gf_h:-/root}\n";

/// Where a job's boot script runs, which decides how it reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Node {
    /// A cloud's instance: run as root at first boot, the job as the login
    /// user, reports through the cloud's metadata service and API (the
    /// module docs).
    #[default]
    Cloud,
    /// A process on this machine (the `local` provider): run as the user
    /// running gpufleet, its node directory `$HOME/node` (the instance's own
    /// directory), reports appended as `KEY VALUE` lines to
    /// `$HOME/node/report`, which the local provider writes on the
    /// instance as tags, an interruption notice told by the file
    /// `$HOME/node/notice`, a heartbeat every [`LOCAL_BEAT_SECS`] s.
    /// Nothing reaches a metadata service or a cloud's API.
    Local,
}

/// The heartbeat of a job on the `local` provider, in seconds (a cloud
/// node's is 60).
pub const LOCAL_BEAT_SECS: u32 = 2;

/// Fills `req` with the workload for a launch on `cloud`: the boot script and
/// the cloud's access settings.
pub fn apply(
    workload: &Workload,
    req: &mut LaunchRequest,
    job_id: &str,
    attempt: u32,
    node: Node,
) -> Result<()> {
    let cloud = req.pool.cloud;
    if let Some(access) = workload.access.get(&cloud) {
        req.access = access.clone();
    }
    if !workload.is_empty() || req.access.ssh_public_key.is_some() {
        req.boot_script = Some(boot_script_on(
            node,
            workload,
            cloud,
            job_id,
            attempt,
            req.access.ssh_public_key.as_deref(),
        )?);
    }
    Ok(())
}

/// How a process of the `local` provider reports: `KEY VALUE` lines
/// appended to its node directory's `report` file (one `printf` a call, so
/// a reader sees whole lines), which the provider writes on the instance.
pub(crate) const LOCAL_REPORTER: &str = r#"report() {
  local out=""
  while [ $# -ge 2 ]; do out="$out$1 $2"$'\n'; shift 2; done
  printf '%s' "$out" >> "$_gf_d/report"
}"#;

/// How a process of the `local` provider sees its interruption notice: the
/// provider creates `notice` in its node directory.
pub(crate) const LOCAL_NOTICE: &str = r#"notice_pending() { [ -e "$_gf_d/notice" ]; }"#;

/// A shell word holding `s` exactly (single-quoted).
pub(crate) fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// The lines that export a workload's `env`: every name exactly as set
/// (the scripts' own variables are `_gf_`-named, which a job may not use),
/// except `PATH`, whose value goes before the node's own so that the
/// script's tools stay reachable.
pub(crate) fn env_exports(env: &std::collections::BTreeMap<String, String>) -> String {
    env.iter()
        .map(|(k, v)| {
            if k == "PATH" {
                format!("export PATH={}:\"$PATH\"\n", quote(v))
            } else {
                format!("export {k}={}\n", quote(v))
            }
        })
        .collect()
}

/// A here-document carrying `body` verbatim to `path`.
fn heredoc(path: &str, body: &str) -> Result<String> {
    let tag = format!("GPUFLEET_EOF_{:016x}", fnv1a64(body.as_bytes()));
    if body.lines().any(|l| l.trim() == tag) {
        return Err(Error::invalid_input(format!(
            "a command contains the line '{tag}', which the boot script reserves"
        )));
    }
    Ok(format!(
        "cat > {path} <<'{tag}'\n{body}\n{tag}\nchmod 0755 {path}\n"
    ))
}

#[cfg(test)]
/// [`node_side`]'s reporter, for the tests.
pub(crate) fn reporter(cloud: Cloud) -> &'static str {
    node_side(cloud).map(|(r, _)| r).unwrap_or("")
}

#[cfg(test)]
/// [`node_side`]'s notice check, for the tests.
pub(crate) fn notice_check(cloud: Cloud) -> &'static str {
    node_side(cloud)
        .map(|(_, n)| n)
        .unwrap_or("notice_pending() { return 1; }")
}

/// The boot script of attempt `attempt` of `job_id` on an instance of
/// `cloud`.
pub fn boot_script(
    workload: &Workload,
    cloud: Cloud,
    job_id: &str,
    attempt: u32,
    ssh_public_key: Option<&str>,
) -> Result<String> {
    boot_script_on(
        Node::Cloud,
        workload,
        cloud,
        job_id,
        attempt,
        ssh_public_key,
    )
}

/// The boot script of attempt `attempt` of `job_id` on `node`: on a
/// cloud's instance ([`boot_script`]) or as a process of the `local`
/// provider (which reads no secret: there is no cloud identity to read
/// them with).
pub fn boot_script_on(
    node: Node,
    workload: &Workload,
    cloud: Cloud,
    job_id: &str,
    attempt: u32,
    ssh_public_key: Option<&str>,
) -> Result<String> {
    workload.validate()?;
    let local = node == Node::Local;
    if local && !workload.secrets.is_empty() {
        return Err(Error::invalid_input(format!(
            "job {job_id} reads secrets ({}), which a node reads with its cloud identity: the local provider has none; run it on a cloud, or give the values in env for a local try",
            workload.secrets.keys().cloned().collect::<Vec<_>>().join(", ")
        )));
    }
    // The node directory, the login user and how a command runs as it.
    let (dir, login, as_user) = if local {
        (
            "\"$HOME/node\"".to_string(),
            "_gf_u=$(id -un); _gf_h=$HOME\n",
            "",
        )
    } else {
        (
            NODE_DIR.to_string(),
            LOGIN_USER,
            "runuser -u \"$_gf_u\" -- ",
        )
    };
    let (report, notice) = if local {
        (LOCAL_REPORTER, LOCAL_NOTICE)
    } else {
        node_side(cloud)?
    };
    let mut s = String::new();
    s.push_str("#!/bin/bash\n");
    let on = if local {
        format!("{cloud} (the local provider: a process on this machine)")
    } else {
        cloud.to_string()
    };
    s.push_str(&format!(
        "# gpufleet boot script: job {job_id}, attempt {attempt}, {on}. Generated; the job file is the source.\n"
    ));
    s.push_str("set -u\n");
    // Boot scripts start with a short PATH (cloud-init, GCE's script
    // runner): the clouds' CLIs the node reports with live in /usr/local/bin
    // (AWS CLI v2) and /snap/bin (gcloud on Ubuntu's images).
    s.push_str("export PATH=\"$PATH:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:/snap/bin\"\n");
    s.push_str(&format!("_gf_d={dir}\nmkdir -p \"$_gf_d\"\n"));
    // Everything the script and the job print goes to a file and to the
    // console, which `gpufleet jobs logs` reads through the cloud's API (a
    // local process's output is in its log file already).
    if !local {
        s.push_str("exec > >(tee -a \"$_gf_d/job.log\" > /dev/console 2>/dev/null || tee -a \"$_gf_d/job.log\") 2>&1\n");
    }
    s.push_str(&format!("export GPUFLEET_JOB_ID={}\n", quote(job_id)));
    s.push_str(&format!("export GPUFLEET_ATTEMPT={attempt}\n"));
    s.push_str(&format!("export GPUFLEET_CLOUD={}\n", cloud.as_str()));
    s.push_str(&env_exports(&workload.env));
    s.push_str(login);
    // The job runs as that user: the file it reports progress in sits in a
    // directory of its own (the node directory is root's).
    if local {
        s.push_str("mkdir -p \"$_gf_d/job\"\n");
    } else {
        s.push_str("mkdir -p \"$_gf_d/job\" && chown \"$_gf_u\" \"$_gf_d/job\"\n");
    }
    s.push_str("export GPUFLEET_PROGRESS_FILE=\"$_gf_d/job/progress\"\n");
    if let Some(key) = ssh_public_key.filter(|_| !local) {
        s.push_str(&format!(
            "mkdir -p \"$_gf_h/.ssh\" && printf '%s\\n' {} >> \"$_gf_h/.ssh/authorized_keys\" && chmod 700 \"$_gf_h/.ssh\" && chmod 600 \"$_gf_h/.ssh/authorized_keys\" && chown -R \"$_gf_u\" \"$_gf_h/.ssh\"\n",
            quote(key)
        ));
    }
    s.push_str(report);
    s.push('\n');
    s.push_str(notice);
    s.push('\n');
    // The secrets, read with the node's own identity into the environment
    // (never the user data: that holds only their references).
    if !local {
        s.push_str(&secret_reads(workload, cloud)?);
    }
    // The environment the commands see, saved so the hook run by the watch
    // agent sees it too.
    // Readable by root alone: the job's environment may hold its secrets.
    s.push_str("(umask 077; export -p > \"$_gf_d/env.sh\")\n");
    if let Some(setup) = &workload.setup {
        s.push_str(&heredoc("\"$_gf_d/setup.sh\"", setup)?);
    }
    if let Some(run) = &workload.run {
        s.push_str(&heredoc("\"$_gf_d/run.sh\"", run)?);
    }
    // The hook the watch agent runs (as root) on a notice: a script of its
    // own, so it names the node directory, the job's environment and its
    // user itself (none of them is in the agent's environment). The
    // checkpoint runs as the job's user, as `setup` and `run` do, so what it
    // writes is the job's.
    let mut hook = format!(
        "_gf_d={dir}\n. \"$_gf_d/env.sh\"\n{login}{report}\nreport gpufleet:notice \"$(date +%s)\"\n"
    );
    if let Some(checkpoint) = &workload.checkpoint {
        s.push_str(&heredoc("\"$_gf_d/checkpoint.sh\"", checkpoint)?);
        hook.push_str(&format!(
            "cd \"$_gf_h\" && {as_user}bash \"$_gf_d/checkpoint.sh\"\n"
        ));
    }
    s.push_str(&heredoc("\"$_gf_d/on-notice.sh\"", &hook)?);
    s.push_str(&format!(
        "_gf_beat_secs={}\n",
        if local { LOCAL_BEAT_SECS } else { 60 }
    ));
    s.push_str(
        r#"report gpufleet:heartbeat "$(date +%s)"
( while sleep "$_gf_beat_secs"; do
    set -- gpufleet:heartbeat "$(date +%s)"
    if [ -s "$GPUFLEET_PROGRESS_FILE" ]; then
      _gf_p=$(awk '{ v = $1 + 0; if (v < 0) v = 0; if (v > 1) v = 1; printf "%d", v * 1000 }' "$GPUFLEET_PROGRESS_FILE" 2>/dev/null)
      [ -n "$_gf_p" ] && set -- "$@" gpufleet:progress "$_gf_p"
    fi
    if [ -s "$_gf_d/gpu" ]; then
      while read -r _gf_k _gf_v; do
        case "$_gf_k" in gpufleet:gpu|gpufleet:gpu-quiet) set -- "$@" "$_gf_k" "$_gf_v" ;; esac
      done < "$_gf_d/gpu"
    fi
    report "$@"
  done ) &
_gf_beat=$!
_gf_notice=
"#,
    );
    // On a cloud the watch agent, where the image has gpufleet; on this
    // machine never (it would ask a metadata service): the script watches
    // for the notice itself and runs the hook once (until the job ends).
    let watch = r#"( while sleep 5; do notice_pending && { bash "$_gf_d/on-notice.sh"; break; }; done ) &
_gf_notice=$!
"#;
    if local {
        s.push_str(&watch.replace("sleep 5", "sleep 1"));
    } else {
        s.push_str(&format!(
            r#"if command -v gpufleet >/dev/null 2>&1; then
  gpufleet watch --cloud "$GPUFLEET_CLOUD" --on-notice "bash $_gf_d/on-notice.sh" --gpu-summary "$_gf_d/gpu" &
else
  # No agent on the image: the script watches for the notice itself, every
  # 5 s, and runs the hook once (until the job ends).
  {}fi
"#,
            watch.replace('\n', "\n  ").trim_end_matches("  ")
        ));
    }
    if workload.setup.is_some() {
        s.push_str(&format!(
            "cd \"$_gf_h\" && {as_user}bash \"$_gf_d/setup.sh\" || {{ _gf_rc=$?; echo \"gpufleet: setup exited with $_gf_rc\"; report gpufleet:exit \"$_gf_rc\"; kill $_gf_beat $_gf_notice 2>/dev/null; exit \"$_gf_rc\"; }}\n",
        ));
    }
    if workload.run.is_some() {
        s.push_str(&format!(
            "cd \"$_gf_h\" && {as_user}bash \"$_gf_d/run.sh\"; _gf_rc=$?\necho \"gpufleet: run exited with $_gf_rc\"\nreport gpufleet:exit \"$_gf_rc\"\nkill $_gf_beat $_gf_notice 2>/dev/null\n",
        ));
    }
    check_size(&format!("the boot script for job {job_id}"), s.len())?;
    Ok(s)
}

/// Refuses a boot script of `len` bytes over every cloud's user-data limit
/// ([`gpufleet_core::MAX_BOOT_SCRIPT`]), naming `what` and its size.
pub(crate) fn check_size(what: &str, len: usize) -> Result<()> {
    if len > gpufleet_core::MAX_BOOT_SCRIPT {
        return Err(Error::invalid_input(format!(
            "{what} is {len} bytes, over the {} byte limit of the clouds' user data: move long setup or env into a script the setup command fetches",
            gpufleet_core::MAX_BOOT_SCRIPT
        )));
    }
    Ok(())
}

/// Checks that `spec`'s boot script can be built and fits every cloud the
/// job may run on (each with its secrets' reads and its access settings):
/// done when a job is submitted, so that a script too long is refused then
/// rather than by every launch (which would set each pool aside).
pub fn check_fits(spec: &gpufleet_core::placer::JobSpec, job_id: &str) -> Result<()> {
    let w = &spec.workload;
    if w.is_empty() {
        return Ok(());
    }
    let clouds: &[Cloud] = if spec.clouds.is_empty() {
        &Cloud::REAL
    } else {
        &spec.clouds
    };
    for cloud in clouds
        .iter()
        .filter(|c| w.secrets.values().all(|refs| refs.contains_key(c)))
    {
        let key = w
            .access
            .get(cloud)
            .and_then(|a| a.ssh_public_key.as_deref());
        // The longest attempt number a key can carry.
        boot_script_on(Node::Cloud, w, *cloud, job_id, u32::MAX, key)?;
    }
    Ok(())
}

/// The tests' moto_server, from the test kit the AWS provider's tests use.
#[cfg(all(test, unix))]
use gpufleet_testkit::aws::moto;

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn workload() -> Workload {
        let mut env = BTreeMap::new();
        env.insert("DATA".to_string(), "s3://b/it's here".to_string());
        Workload {
            run: Some("python train.py --resume".into()),
            setup: Some("pip install -r requirements.txt".into()),
            env,
            checkpoint: Some("kill -USR1 $(pgrep -f train.py)".into()),
            ..Workload::default()
        }
    }

    /// Each cloud has its node pieces, whole, in the boot script of an
    /// instance there; the fake cloud's are its own; every real cloud has a
    /// row.
    #[test]
    fn each_clouds_node_pieces_are_in_its_boot_script() {
        for cloud in Cloud::REAL {
            let (report, notice) = node_side(cloud).unwrap();
            assert!(report.contains("report() {") && notice.starts_with("notice_pending() {"));
            let script = boot_script(&workload(), cloud, "j", 1, None).unwrap();
            assert!(
                script.contains(report) && script.contains(notice),
                "{cloud}"
            );
        }
        let (report, notice) = node_side(Cloud::Fake).unwrap();
        assert!(report.contains("printf 'report") && notice.contains("return 1"));
        assert_eq!(node::NODE_SIDES.len(), Cloud::REAL.len() + 1);
    }

    /// Every name a job may set reaches its commands exactly as set, those
    /// the boot script once used for its own state included (they had
    /// redirected its directory, its user and its heartbeat, or gone
    /// missing); `PATH` goes before the node's own; the script's own state
    /// is untouched (its reports land in its directory, the run's exit is
    /// reported).
    #[cfg(unix)]
    #[test]
    fn every_name_a_job_may_set_arrives_exactly_as_set() {
        let names = [
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
            "b64",
            "BEAT",
            "NOTICE",
            "BEAT_SECS",
            "rc",
            "p",
            "k",
            "out",
            "md",
            "t",
            "id",
            "region",
            "tags",
            "ak",
            "sk",
            "tok",
            "role",
            "cred",
            "LD_LIBRARY_PATH",
        ];
        let home = tempfile::tempdir().unwrap();
        let seen = home.path().join("seen");
        let mut env = std::collections::BTreeMap::new();
        for n in names {
            env.insert(
                n.to_string(),
                format!("{n}: 'q' \"dq\" $(false) `x` \\ é\n"),
            );
        }
        env.insert("PATH".to_string(), "/opt/job bin".to_string());
        let dump: String = names
            .iter()
            .map(|n| format!("printf '%s\\0' \"${n}\"; "))
            .collect();
        let w = Workload {
            run: Some(format!(
                "{{ {dump} printf '%s\\0' \"$PATH\"; }} > {}",
                quote(&seen.display().to_string())
            )),
            env: env.clone(),
            ..Workload::default()
        };
        let s = boot_script_on(Node::Local, &w, Cloud::Aws, "job-names", 1, None).unwrap();
        let out = std::process::Command::new("bash")
            .arg("-c")
            .arg(&s)
            .env("HOME", home.path())
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let got = std::fs::read(&seen).unwrap();
        let got: Vec<String> = got
            .split(|b| *b == 0)
            .map(|v| String::from_utf8_lossy(v).to_string())
            .collect();
        for (i, n) in names.iter().enumerate() {
            assert_eq!(got[i], env[*n], "{n}");
        }
        let path = &got[names.len()];
        assert!(path.starts_with("/opt/job bin:"), "{path}");
        assert!(path.contains("/usr/bin"), "{path}");
        // The script's own directory and reports, untouched by D, U, H.
        let report = std::fs::read_to_string(home.path().join("node/report")).unwrap();
        assert!(report.contains("gpufleet:heartbeat "), "{report}");
        assert!(report.contains("gpufleet:exit 0"), "{report}");
        // No value was printed by the script itself.
        let printed = String::from_utf8_lossy(&out.stdout).to_string()
            + &String::from_utf8_lossy(&out.stderr);
        assert!(!printed.contains("'q'"), "{printed}");
    }

    /// On the local provider the script runs as this user, under `$HOME`,
    /// asks no metadata service or cloud API, and reports to the file the
    /// provider reads: heartbeat, progress, the notice (after the
    /// checkpoint ran) and the exit status.
    #[cfg(unix)]
    #[test]
    fn on_the_local_provider_the_script_reports_to_a_file_and_sees_its_notice() {
        let w = Workload {
            run: Some(
                "echo 0.25 > \"$GPUFLEET_PROGRESS_FILE\"; for i in 1 2 3 4 5 6 7 8; do [ -e \"$HOME/checkpointed\" ] && break; sleep 0.5; done; sleep 2.5; exit 3"
                    .into(),
            ),
            checkpoint: Some("touch \"$HOME/checkpointed\"".into()),
            ..Workload::default()
        };
        let s = boot_script_on(
            Node::Local,
            &w,
            Cloud::Aws,
            "job-1",
            2,
            Some("ssh-ed25519 AAAA me"),
        )
        .unwrap();
        for cloudish in [
            "169.254",
            "metadata",
            "runuser",
            "curl",
            "gpufleet watch",
            "authorized_keys",
            "/dev/console",
            NODE_DIR,
        ] {
            assert!(
                !s.contains(cloudish),
                "{cloudish} in the local script:\n{s}"
            );
        }
        let home = tempfile::tempdir().unwrap();
        let mut child = std::process::Command::new("bash")
            .arg("-c")
            .arg(&s)
            .env("HOME", home.path())
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap();
        // The provider tells of a notice by a file, once the node directory
        // is there.
        let node = home.path().join("node");
        for _ in 0..50 {
            if node.join("report").exists() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        std::fs::write(node.join("notice"), "preemption\n").unwrap();
        let status = child.wait().unwrap();
        assert!(status.success(), "the boot script itself exits 0");
        assert!(
            home.path().join("checkpointed").exists(),
            "the checkpoint ran on the notice"
        );
        let report = std::fs::read_to_string(node.join("report")).unwrap();
        let keys: Vec<&str> = report
            .lines()
            .filter_map(|l| l.split_once(' '))
            .map(|(k, _)| k)
            .collect();
        assert_eq!(keys.first(), Some(&"gpufleet:heartbeat"), "{report}");
        assert!(report.contains("gpufleet:progress 250\n"), "{report}");
        assert!(keys.contains(&"gpufleet:notice"), "{report}");
        assert!(report.ends_with("gpufleet:exit 3\n"), "{report}");
        // Secrets are read with a cloud identity, which a local process lacks.
        let mut secret = w.clone();
        secret.secrets.insert("HF_TOKEN".into(), Default::default());
        let e = boot_script_on(Node::Local, &secret, Cloud::Aws, "job-1", 1, None).unwrap_err();
        assert!(e.to_string().contains("reads secrets (HF_TOKEN)"), "{e}");
    }

    #[test]
    fn the_script_runs_setup_the_job_and_the_watch_agent_and_reports() {
        for cloud in Cloud::REAL {
            let s = boot_script(
                &workload(),
                cloud,
                "job-1",
                3,
                Some("ssh-ed25519 AAAAC3 me@laptop"),
            )
            .unwrap();
            assert!(s.starts_with("#!/bin/bash\n"));
            assert!(s.contains("python train.py --resume"));
            assert!(s.contains("pip install -r requirements.txt"));
            assert!(s.contains("gpufleet watch --cloud \"$GPUFLEET_CLOUD\" --on-notice"));
            assert!(s.contains(&format!("export GPUFLEET_CLOUD={}\n", cloud.as_str())));
            // The agent's GPU summary goes out with the heartbeat.
            assert!(s.contains("--gpu-summary \"$_gf_d/gpu\""));
            assert!(s.contains("gpufleet:gpu|gpufleet:gpu-quiet"));
            assert!(s.contains("gpufleet:heartbeat"));
            assert!(s.contains("gpufleet:exit"));
            assert!(s.contains("export GPUFLEET_ATTEMPT=3"));
            // A quote in a value stays inside its word.
            assert!(s.contains(r"export DATA='s3://b/it'\''s here'"));
            assert!(s.contains("'ssh-ed25519 AAAAC3 me@laptop'"));
        }
        let aws = boot_script(&workload(), Cloud::Aws, "j", 1, None).unwrap();
        assert!(aws.contains("aws ec2 create-tags"));
        assert!(aws.contains(":/usr/local/bin:") && aws.contains(":/snap/bin\"\n"));
        let gcp = boot_script(&workload(), Cloud::Gcp, "j", 1, None).unwrap();
        assert!(gcp.contains("gcloud compute instances add-labels"));
        let az = boot_script(&workload(), Cloud::Azure, "j", 1, None).unwrap();
        assert!(az.contains("providers/Microsoft.Resources/tags/default"));
    }

    #[test]
    fn the_script_passes_bash_syntax_check() {
        let Ok(out) = std::process::Command::new("bash").arg("--version").output() else {
            return;
        };
        assert!(out.status.success());
        for cloud in Cloud::REAL {
            let s =
                boot_script(&workload(), cloud, "job-1", 1, Some("ssh-ed25519 AAAA x")).unwrap();
            let file = tempfile::Builder::new()
                .prefix(&format!("gpufleet-boot-{cloud}-"))
                .tempfile()
                .unwrap();
            std::fs::write(file.path(), &s).unwrap();
            let st = std::process::Command::new("bash")
                .arg("-n")
                .arg(file.path())
                .status()
                .unwrap();
            assert!(st.success(), "bash -n failed for {cloud}:\n{s}");
        }
    }

    /// Writes an executable `sh` script `name` in `dir` running `body`: a
    /// stand-in for one of the node's tools.
    #[cfg(unix)]
    pub(super) fn shim(dir: &std::path::Path, name: &str, body: &str) {
        use std::os::unix::fs::PermissionsExt;
        let path = dir.join(name);
        std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }

    /// A `PATH` of `dir` alone, holding links to `tools` (found on this
    /// `PATH`) beside the shims written there: a node image without the
    /// clouds' CLIs, whatever this machine has installed.
    #[cfg(unix)]
    pub(super) fn only(dir: &std::path::Path, tools: &[&str]) -> String {
        let path = std::env::var_os("PATH").unwrap_or_default();
        for tool in tools {
            let found = std::env::split_paths(&path)
                .map(|d| d.join(tool))
                .find(|p| p.exists())
                .unwrap_or_else(|| panic!("{tool} is not on PATH"));
            std::os::unix::fs::symlink(found, dir.join(tool)).unwrap();
        }
        dir.display().to_string()
    }

    /// A `PATH` that finds the shims in `dir` before the real tools.
    pub(super) fn shimmed(dir: &std::path::Path) -> String {
        format!(
            "{}:{}",
            dir.display(),
            std::env::var("PATH").unwrap_or_default()
        )
    }

    /// The script run for real by bash in a scratch directory, with shims
    /// for the node's tools (`getent` names a login user, `runuser` and
    /// `chown` record what they were asked, `curl` plays the metadata
    /// service, `aws` records the tags, `sleep` makes the heartbeat quick):
    /// the job runs as the login user and writes its progress in a directory
    /// that user is given, and the heartbeat, the progress and the exit
    /// status go out; the saved environment is readable by root alone. The
    /// progress file used to sit in the root-owned node directory, where the
    /// job could not write it.
    #[cfg(unix)]
    #[test]
    fn the_script_runs_the_job_as_its_user_and_reports_progress_and_exit() {
        use std::os::unix::fs::PermissionsExt;
        use std::process::{Command, Stdio};
        let Ok(sleep) = Command::new("sh").args(["-c", "command -v sleep"]).output() else {
            return;
        };
        let sleep = String::from_utf8_lossy(&sleep.stdout).trim().to_string();
        if sleep.is_empty() {
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let (bin, node, home) = (
            dir.path().join("bin"),
            dir.path().join("node"),
            dir.path().join("home"),
        );
        std::fs::create_dir_all(&bin).unwrap();
        std::fs::create_dir_all(&home).unwrap();
        let log = dir.path().join("calls.log");
        let (log_s, home_s) = (log.display(), home.display());
        let shims = [
            ("getent", format!("echo 'tester:x:1000:1000::{home_s}:/bin/bash'")),
            ("runuser", format!("echo \"runuser $*\" >> '{log_s}'\nshift 3\nexec \"$@\"")),
            ("chown", format!("echo \"chown $*\" >> '{log_s}'")),
            (
                "curl",
                "case \"$*\" in *api/token*) echo tok ;; *instance-id*) echo i-0abc ;; *region*) echo us-east-1 ;; *) exit 22 ;; esac".to_string(),
            ),
            ("aws", format!("echo \"aws $*\" >> '{log_s}'")),
            ("sleep", format!("exec {sleep} 0.05")),
        ];
        for (name, body) in shims {
            shim(&bin, name, &body);
        }
        let mut w = workload();
        w.setup = Some("true".into());
        w.run = Some(format!(
            "echo 0.5 > \"$GPUFLEET_PROGRESS_FILE\"\n{sleep} 1\nexit 0"
        ));
        w.env.insert("HF_TOKEN".into(), "hf-secret".into());
        w.checkpoint = Some(
            "echo \"ckpt $GPUFLEET_JOB_ID $HF_TOKEN\" > \"$GPUFLEET_PROGRESS_FILE.ckpt\"".into(),
        );
        let script = boot_script(&w, Cloud::Aws, "job-1", 1, None).unwrap();
        let here = format!("_gf_d={}\n", node.display());
        assert!(script.contains(&format!("_gf_d={NODE_DIR}\n")));
        let script = script
            .replace(&format!("_gf_d={NODE_DIR}\n"), &here)
            .replace("/dev/console", "/dev/null");
        let file = dir.path().join("boot.sh");
        std::fs::write(&file, script).unwrap();
        let out = std::fs::File::create(dir.path().join("out.log")).unwrap();
        let path = shimmed(&bin);
        let status = Command::new("bash")
            .arg(&file)
            .env("PATH", &path)
            .env_remove("GPUFLEET_PROGRESS_FILE")
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .status()
            .unwrap();
        let calls = std::fs::read_to_string(&log).unwrap_or_default();
        let printed = std::fs::read_to_string(dir.path().join("out.log")).unwrap_or_default();
        assert!(status.success(), "{status}\n{printed}\n{calls}");
        let job_dir = node.join("job");
        for needle in [
            format!("chown tester {}", job_dir.display()),
            format!("runuser -u tester -- bash {}/run.sh", node.display()),
            "Key=gpufleet:heartbeat".to_string(),
            "Key=gpufleet:progress,Value=500".to_string(),
            "Key=gpufleet:exit,Value=0".to_string(),
        ] {
            assert!(
                calls.contains(&needle),
                "{needle:?} not in:\n{calls}\n{printed}"
            );
        }
        let progress = std::fs::read_to_string(job_dir.join("progress")).unwrap();
        assert_eq!(progress.trim(), "0.5");
        let env = node.join("env.sh");
        assert!(std::fs::read_to_string(&env).unwrap().contains("hf-secret"));
        let mode = std::fs::metadata(&env).unwrap().permissions().mode();
        assert_eq!(mode & 0o077, 0, "env.sh is {mode:o}");

        // The watch agent's hook on a notice, run as the agent runs it (its
        // own process, none of the boot script's variables): it reports the
        // notice and runs the checkpoint as the job's user, with the job's
        // environment. It used to read `$D`, unset there, so it never found
        // the environment.
        let hook = node.join("on-notice.sh");
        let status = Command::new("bash")
            .arg(&hook)
            .env_clear()
            .env("PATH", &path)
            .stdin(Stdio::null())
            .status()
            .unwrap();
        assert!(status.success(), "{status}");
        let calls = std::fs::read_to_string(&log).unwrap_or_default();
        for needle in [
            "Key=gpufleet:notice".to_string(),
            format!("runuser -u tester -- bash {}/checkpoint.sh", node.display()),
        ] {
            assert!(calls.contains(&needle), "{needle:?} not in:\n{calls}");
        }
        let saved = std::fs::read_to_string(job_dir.join("progress.ckpt")).unwrap();
        assert_eq!(saved.trim(), "ckpt job-1 hf-secret");
    }

    /// GCP's reporter on an image without gcloud, run by bash with a `curl`
    /// shim playing the metadata server and the Compute API: it reads the
    /// instance's labels and fingerprint, and sets them merged (the launch's
    /// labels kept, an old heartbeat replaced, not repeated), with the
    /// fingerprint it read; when another writer changed them meanwhile (412)
    /// it reads and sets once more. The token reaches curl on stdin only.
    /// Without this path such a node never reported.
    #[cfg(unix)]
    #[test]
    fn gcp_reports_through_set_labels_with_curl_alone() {
        use std::process::Command;
        let dir = tempfile::tempdir().unwrap();
        let path = only(dir.path(), &["bash", "sed", "tr", "cat"]);
        let log = dir.path().join("calls.log");
        let posts = dir.path().join("posts");
        let api = "http://127.0.0.1:9/compute/v1/";
        let instance =
            "http://127.0.0.1:9/compute/v1/projects/proj-1/zones/us-central1-a/instances/vm-1";
        shim(
            dir.path(),
            "curl",
            &format!(
                r#"echo "args: $*" >> '{log}'
case "$*" in
*metadata.google.internal*/instance/name*) echo vm-1 ;;
*metadata.google.internal*/instance/zone*) echo projects/123/zones/us-central1-a ;;
*metadata.google.internal*/project/project-id*) echo proj-1 ;;
*metadata.google.internal*/token*) echo '{{"access_token":"ya29.secret-1","expires_in":3599,"token_type":"Bearer"}}' ;;
*"{instance}?fields=labels,labelFingerprint"*)
  echo "stdin: $(cat)" >> '{log}'
  n=$(cat '{posts}' 2>/dev/null || echo 0)
  printf '{{\n  "labels": {{\n    "gpufleet-managed": "true",\n    "gpufleet-job": "j-1",\n    "gpufleet-heartbeat": "100"\n  }},\n  "labelFingerprint": "fp-%s="\n}}\n' "$n" ;;
*"{instance}/setLabels"*)
  echo "stdin: $(cat)" >> '{log}'
  n=$(cat '{posts}' 2>/dev/null || echo 0); echo $((n + 1)) > '{posts}'
  [ "$n" = 0 ] && exit 22
  echo '{{"kind":"compute#operation","status":"RUNNING"}}' ;;
*) exit 7 ;;
esac"#,
                log = log.display(),
                posts = posts.display(),
            ),
        );
        let script = format!(
            "{}\nreport gpufleet:heartbeat 1795000000 gpufleet:progress 500\n",
            reporter(Cloud::Gcp)
        );
        let status = Command::new("bash")
            .args(["-c", &script])
            .env("PATH", &path)
            .env("CLOUDSDK_API_ENDPOINT_OVERRIDES_COMPUTE", api)
            .status()
            .unwrap();
        assert!(status.success());
        let calls = std::fs::read_to_string(&log).unwrap();
        let sets: Vec<&str> = calls
            .lines()
            .filter(|l| l.starts_with("args:") && l.contains("/setLabels"))
            .collect();
        assert_eq!(
            sets.len(),
            2,
            "one refused (412), one more after a fresh read:\n{calls}"
        );
        // The second carries the fingerprint read after the first failed.
        assert!(
            sets[1].contains(r#"{"labels":{"gpufleet-managed":"true","gpufleet-job":"j-1","gpufleet-heartbeat":"1795000000","gpufleet-progress":"500"},"labelFingerprint":"fp-1="}"#),
            "{calls}"
        );
        assert!(sets[0].contains(r#""labelFingerprint":"fp-0=""#), "{calls}");
        assert!(
            !calls
                .lines()
                .any(|l| l.starts_with("args:") && l.contains("ya29.secret-1")),
            "the token on a command line:\n{calls}"
        );
        assert!(
            calls.contains("stdin: Authorization: Bearer ya29.secret-1"),
            "{calls}"
        );
    }

    /// Azure's reporter run for real by bash with a `curl` shim playing IMDS
    /// and recording the Resource Manager call: a tag merge on the VM's own
    /// resource id, at the Resource Manager of the VM's cloud, with the
    /// managed identity's token read by curl from stdin (never on a command
    /// line, where any process could read it). No az CLI is needed.
    #[cfg(unix)]
    #[test]
    fn azure_reports_through_the_tags_api_with_curl_alone() {
        use std::process::Command;
        for (env, arm) in [
            ("AzurePublicCloud", "https://management.azure.com"),
            (
                "AZUREUSGOVERNMENTCLOUD",
                "https://management.usgovcloudapi.net",
            ),
        ] {
            let dir = tempfile::tempdir().unwrap();
            let log = dir.path().join("calls.log");
            let rid = "/subscriptions/s-1/resourceGroups/g/providers/Microsoft.Compute/virtualMachines/vm-1";
            shim(
                dir.path(),
                "curl",
                &format!(
                    "case \"$*\" in\n*resourceId*) echo '{rid}' ;;\n*azEnvironment*) echo '{env}' ;;\n*oauth2/token*) echo '{{\"access_token\":\"tok-secret-1\",\"expires_in\":\"86399\"}}' ;;\n*) echo \"args: $*\" >> '{log}'; echo \"stdin: $(cat)\" >> '{log}' ;;\nesac",
                    log = log.display()
                ),
            );
            let script = format!(
                "{}\nreport gpufleet:heartbeat 1795000000 gpufleet:progress 500\n",
                reporter(Cloud::Azure)
            );
            let path = shimmed(dir.path());
            let status = Command::new("bash")
                .args(["-c", &script])
                .env("PATH", path)
                .status()
                .unwrap();
            assert!(status.success());
            let calls = std::fs::read_to_string(&log).unwrap();
            let args = calls.lines().find(|l| l.starts_with("args:")).unwrap();
            assert!(
                args.contains(&format!(
                    "{arm}{rid}/providers/Microsoft.Resources/tags/default?api-version=2021-04-01"
                )),
                "{calls}"
            );
            assert!(args.contains("-X PATCH -H @-"), "{calls}");
            assert!(
                args.contains(r#"{"operation":"Merge","properties":{"tags":{"gpufleet:heartbeat":"1795000000","gpufleet:progress":"500"}}}"#),
                "{calls}"
            );
            assert!(
                !args.contains("tok-secret-1"),
                "the token on a command line: {calls}"
            );
            assert!(
                calls.contains("stdin: Authorization: Bearer tok-secret-1"),
                "{calls}"
            );
        }
    }

    /// The real curl on this machine's `PATH`, for tests that talk to a
    /// stand-in through it (none: the test is skipped).
    pub(super) fn real_curl() -> Option<std::path::PathBuf> {
        std::env::var_os("PATH").and_then(|p| {
            std::env::split_paths(&p)
                .map(|d| d.join("curl"))
                .find(|c| c.exists())
        })
    }

    /// The text of `xml` between `open` and the next `<`.
    pub(super) fn between<'a>(xml: &'a str, open: &str) -> &'a str {
        xml.split_once(open)
            .and_then(|(_, rest)| rest.split('<').next())
            .unwrap_or("")
    }

    /// AWS's reporter on an image without the aws CLI, run by bash with the
    /// real curl against moto_server with IAM authentication on (moto then
    /// recomputes every request's SigV4 signature and refuses a mismatch):
    /// CreateTags signed by curl with the instance profile's temporary
    /// credentials, which a `curl` shim serves as IMDS does and which never
    /// appear on a command line. Values with `;`, `/`, `+`, `&` and spaces
    /// arrive intact. With a wrong secret moto refuses the call, so the
    /// check can fail. Without this path such a node never reported, and
    /// failed its boot grace.
    #[cfg(unix)]
    #[test]
    fn aws_reports_with_curl_alone_signed_as_ec2_checks_it() {
        use std::process::Command;
        let Some(real_curl) = real_curl() else {
            eprintln!("*** SKIPPED: no curl on PATH ***");
            return;
        };
        let shims = tempfile::tempdir().unwrap();
        let path = only(shims.path(), &["bash", "head", "sed", "tr", "cat"]);
        // Four requests free of authentication set up the role, its
        // credentials and the instance; every later one is checked.
        let Some(moto) = moto::Moto::start_with(&[("INITIAL_NO_AUTH_ACTION_COUNT", "4")]) else {
            return;
        };
        let call = |service: &str, form: &[(&str, &str)]| -> String {
            let mut c = Command::new(&real_curl);
            c.args(["-s", "-m", "30", &format!("{}/", moto.url), "-H"]).arg(format!(
                "Authorization: AWS4-HMAC-SHA256 Credential=setup/20261128/us-east-1/{service}/aws4_request, SignedHeaders=host, Signature=0"
            ));
            for (k, v) in form {
                c.arg("--data-urlencode").arg(format!("{k}={v}"));
            }
            String::from_utf8(c.output().unwrap().stdout).unwrap()
        };
        let trust = r#"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":{"Service":"ec2.amazonaws.com"},"Action":"sts:AssumeRole"}]}"#;
        let allow = r#"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":["ec2:CreateTags","ec2:DescribeTags"],"Resource":"*"}]}"#;
        call(
            "iam",
            &[
                ("Action", "CreateRole"),
                ("RoleName", "node-role"),
                ("AssumeRolePolicyDocument", trust),
                ("Version", "2010-05-08"),
            ],
        );
        call(
            "iam",
            &[
                ("Action", "PutRolePolicy"),
                ("RoleName", "node-role"),
                ("PolicyName", "tag-itself"),
                ("PolicyDocument", allow),
                ("Version", "2010-05-08"),
            ],
        );
        let assumed = call(
            "sts",
            &[
                ("Action", "AssumeRole"),
                ("RoleArn", "arn:aws:iam::123456789012:role/node-role"),
                ("RoleSessionName", "node"),
                ("Version", "2011-06-15"),
            ],
        );
        let run = call(
            "ec2",
            &[
                ("Action", "RunInstances"),
                ("ImageId", "ami-12c6146b"),
                ("MinCount", "1"),
                ("MaxCount", "1"),
                ("InstanceType", "g4dn.xlarge"),
                ("Version", "2016-11-15"),
            ],
        );
        let (ak, sk, tok) = (
            between(&assumed, "<AccessKeyId>"),
            between(&assumed, "<SecretAccessKey>"),
            between(&assumed, "<SessionToken>"),
        );
        let id = between(&run, "<instanceId>");
        assert!(
            !ak.is_empty() && !sk.is_empty() && !tok.is_empty(),
            "{assumed}"
        );
        assert!(id.starts_with("i-"), "{run}");

        let log = shims.path().join("argv.log");
        let report = |secret: &str, tags: &str| {
            // IMDS as EC2 serves it (the credentials document pretty-printed),
            // everything else to the real curl.
            let doc = format!(
                "{{\n  \"Code\" : \"Success\",\n  \"LastUpdated\" : \"2026-11-28T17:00:00Z\",\n  \"Type\" : \"AWS-HMAC\",\n  \"AccessKeyId\" : \"{ak}\",\n  \"SecretAccessKey\" : \"{secret}\",\n  \"Token\" : \"{tok}\",\n  \"Expiration\" : \"2026-11-28T23:00:00Z\"\n}}"
            );
            shim(
                shims.path(),
                "curl",
                &format!(
                    "echo \"$*\" >> '{log}'\ncase \"$*\" in\n*169.254.169.254*api/token*) echo imds-token ;;\n*169.254.169.254*instance-id*) echo {id} ;;\n*169.254.169.254*placement/region*) echo us-east-1 ;;\n*169.254.169.254*services/domain*) echo amazonaws.com ;;\n*169.254.169.254*security-credentials/node-role*) cat <<'DOC'\n{doc}\nDOC\n;;\n*169.254.169.254*security-credentials/*) echo node-role ;;\n*169.254.169.254*) exit 22 ;;\n*) exec '{curl}' \"$@\" ;;\nesac",
                    log = log.display(),
                    curl = real_curl.display(),
                ),
            );
            let script = format!("{}\nreport {tags}\n", reporter(Cloud::Aws));
            let status = Command::new("bash")
                .args(["-c", &script])
                .env("PATH", &path)
                .env("AWS_ENDPOINT_URL", &moto.url)
                .status()
                .unwrap();
            assert!(status.success());
        };
        report("wrong-secret", "gpufleet:exit 1");
        report(
            sk,
            "gpufleet:heartbeat 1795000000 gpufleet:gpu 'u=42;m=1000/8000 a+b&c'",
        );
        // Read back, signed with the same credentials.
        let described = Command::new(&real_curl)
            .args([
                "-s",
                "-m",
                "30",
                "-K",
                "-",
                "--aws-sigv4",
                "aws:amz:us-east-1:ec2",
            ])
            .args(["--data-urlencode", "Action=DescribeTags"])
            .args(["--data-urlencode", "Version=2016-11-15"])
            .args(["--data-urlencode", "Filter.1.Name=resource-id"])
            .arg("--data-urlencode")
            .arg(format!("Filter.1.Value.1={id}"))
            .arg(format!("{}/", moto.url))
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .and_then(|mut child| {
                use std::io::Write;
                child.stdin.take().unwrap().write_all(
                    format!("user = \"{ak}:{sk}\"\nheader = \"X-Amz-Security-Token: {tok}\"\n")
                        .as_bytes(),
                )?;
                child.wait_with_output()
            })
            .unwrap();
        let described = String::from_utf8(described.stdout).unwrap();
        let tag = |key: &str| {
            described
                .split("<item>")
                .find(|i| i.contains(&format!("<key>{key}</key>")))
                .map(|i| between(i, "<value>").to_string())
        };
        assert_eq!(
            tag("gpufleet:heartbeat").as_deref(),
            Some("1795000000"),
            "{described}"
        );
        assert_eq!(
            tag("gpufleet:gpu").as_deref(),
            Some("u=42;m=1000/8000 a+b&amp;c"),
            "{described}"
        );
        assert_eq!(
            tag("gpufleet:exit"),
            None,
            "a wrongly signed call was taken: {described}"
        );
        let argv = std::fs::read_to_string(&log).unwrap();
        assert!(argv.contains("--aws-sigv4 aws:amz:us-east-1:ec2"), "{argv}");
        assert!(
            !argv.contains(sk) && !argv.contains(tok),
            "a secret on a command line:\n{argv}"
        );
    }

    /// Each cloud's `notice_pending`, run by bash with a `curl` shim playing
    /// the metadata service: true on a notice for this node, false without
    /// one (EC2's 404, `FALSE`/`NONE`, another VM's eviction) and when the
    /// metadata service does not answer.
    #[cfg(unix)]
    #[test]
    fn without_the_agent_the_script_sees_each_clouds_notice() {
        use std::process::Command;
        let azure = |vm: &str, kind: &str| {
            format!(
                r#"{{"DocumentIncarnation":2,"Events":[{{"EventId":"e-1","EventType":"Freeze","ResourceType":"VirtualMachine","Resources":["vm-1"],"EventStatus":"Scheduled","NotBefore":""}},{{"EventId":"e-2","EventType":"{kind}","ResourceType":"VirtualMachine","Resources":["{vm}"],"EventStatus":"Scheduled","NotBefore":"Mon, 19 Sep 2016 18:29:47 GMT"}}]}}"#
            )
        };
        let aws = |action: Option<&str>| {
            let mut a = vec![("api/token", "tok".to_string())];
            a.extend(action.map(|b| ("instance-action", b.to_string())));
            a
        };
        let gcp = |preempted: &str, event: &str| {
            vec![
                ("preempted", preempted.to_string()),
                ("maintenance-event", event.to_string()),
            ]
        };
        let az = |body: String| {
            vec![
                ("compute/name", "vm-1".to_string()),
                ("scheduledevents", body),
            ]
        };
        let action = r#"{"action":"terminate","time":"2026-11-28T10:00:00Z"}"#;
        // (cloud, curl's answers by URL part, pending)
        type Case<'a> = (Cloud, Vec<(&'a str, String)>, bool);
        let cases: Vec<Case<'_>> = vec![
            (Cloud::Aws, aws(Some(action)), true),
            (Cloud::Aws, aws(None), false),
            (Cloud::Aws, vec![], false),
            (Cloud::Gcp, gcp("TRUE", "NONE"), true),
            (
                Cloud::Gcp,
                gcp("FALSE", "TERMINATE_ON_HOST_MAINTENANCE"),
                true,
            ),
            (
                Cloud::Gcp,
                gcp("FALSE", "MIGRATE_ON_HOST_MAINTENANCE"),
                false,
            ),
            (Cloud::Azure, az(azure("vm-1", "Preempt")), true),
            (Cloud::Azure, az(azure("vm-2", "Preempt")), false),
            // A name is matched whole: vm-10's eviction is not vm-1's.
            (Cloud::Azure, az(azure("vm-10", "Preempt")), false),
            (
                Cloud::Azure,
                az(r#"{"DocumentIncarnation":1,"Events":[]}"#.into()),
                false,
            ),
        ];
        for (cloud, answers, pending) in cases {
            let dir = tempfile::tempdir().unwrap();
            let mut body = String::from("case \"$*\" in\n");
            for (part, answer) in &answers {
                body.push_str(&format!("*{part}*) printf '%s' '{answer}' ;;\n"));
            }
            // Anything else: not found, as curl -f fails on a 404.
            body.push_str("*) exit 22 ;;\nesac");
            shim(dir.path(), "curl", &body);
            let path = shimmed(dir.path());
            let status = Command::new("bash")
                .args(["-c", &format!("{}\nnotice_pending", notice_check(cloud))])
                .env("PATH", path)
                .status()
                .unwrap();
            assert_eq!(status.success(), pending, "{cloud}: {answers:?}");
        }
        let s = boot_script(&workload(), Cloud::Gcp, "j", 1, None).unwrap();
        assert!(s.contains("notice_pending && { bash \"$_gf_d/on-notice.sh\"; break; }"));
    }

    #[test]
    fn a_reserved_delimiter_or_an_oversized_script_is_refused() {
        let mut w = workload();
        let tag = format!("GPUFLEET_EOF_{:016x}", fnv1a64(b"echo\nGPUFLEET_EOF_x"));
        w.run = Some(format!("echo\n{tag}"));
        // The tag depends on the body, so this one is fine ...
        assert!(boot_script(&w, Cloud::Aws, "j", 1, None).is_ok());
        w.run = Some("x".repeat(20_000));
        let e = boot_script(&w, Cloud::Aws, "j", 1, None).unwrap_err();
        assert!(e.to_string().contains("byte limit"), "{e}");
    }
}
