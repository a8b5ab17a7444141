//! A replica's boot script, and its check at serve start and update.

use super::*;

/// The boot script of a replica on `node` of `cloud`: the environment,
/// `PORT`, a watcher that reports the node's interruption notice as the
/// `gpufleet:notice` tag (as a job's node does: the cloud's metadata
/// service and API on a cloud, the notice and report files on the local
/// provider; the controller drains and replaces the replica when it sees
/// it), `setup`, then `run` in its place.
/// A cloud this build has no node script for is refused.
pub fn replica_script(spec: &ServiceSpec, port: u16, node: Node, cloud: Cloud) -> Result<String> {
    let w = &spec.replica.workload;
    let mut s = String::from("#!/usr/bin/env bash\nset -e\n");
    s.push_str(&crate::workload::env_exports(&w.env));
    s.push_str(&format!("export PORT={port}\n"));
    let (dir, report, notice) = match node {
        Node::Local => (
            "\"$HOME/node\"",
            crate::workload::LOCAL_REPORTER,
            crate::workload::LOCAL_NOTICE,
        ),
        Node::Cloud => {
            let (report, notice) = crate::workload::node_side(cloud)?;
            ("/var/tmp/gpufleet", report, notice)
        }
    };
    s.push_str(&format!(
        "_gf_d={dir}\nmkdir -p \"$_gf_d\"\n{report}\n{notice}\n"
    ));
    s.push_str(
        "( set +e; while sleep 2; do notice_pending && { report gpufleet:notice \"$(date +%s)\"; break; }; done ) >/dev/null 2>&1 &\n",
    );
    if let Some(setup) = &w.setup {
        s.push_str(&format!("bash -c {}\n", quote(setup)));
    }
    if let Some(run) = &w.run {
        s.push_str(&format!("exec bash -c {}\n", quote(run)));
    }
    Ok(s)
}

/// Checks that a replica's boot script fits every cloud's user data on
/// each cloud the service may run on ([`replica_script`]): refused when the
/// service starts or an update is asked for, not by every launch (which
/// would set each pool aside).
pub fn check_replica_script(spec: &ServiceSpec) -> Result<()> {
    let clouds: &[Cloud] = if spec.replica.clouds.is_empty() {
        &Cloud::REAL
    } else {
        &spec.replica.clouds
    };
    for cloud in clouds {
        let len = replica_script(spec, spec.port, Node::Cloud, *cloud)?.len();
        crate::workload::check_size(
            &format!(
                "the boot script of service {}'s replicas on {cloud}",
                spec.name
            ),
            len,
        )?;
    }
    Ok(())
}
