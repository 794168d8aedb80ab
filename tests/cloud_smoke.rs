//! The loopback test cloud works end to end for a non-admin user: `tests/cloud/smoke.py`
//! creates a network, subnet, router, security group, floating IP, an ACTIVE load
//! balancer, servers in soft-anti-affinity groups on both sides of Nova microversion
//! 2.64 and volumes, then deletes them and compares the project's resource counts.
//! It runs with `--own-project`, in a project and user it creates (and deletes) as admin:
//! the other cloud tests run beside it in the member project and would change its counts.
//! Skipped unless cloud tests are enabled (see tests/support/cloud.rs).

use crate::cloud;

use std::process::Command;

#[test]
fn smoke_test_of_the_test_cloud_passes_and_leaves_nothing() {
    let Some(clouds) = cloud::clouds_yaml() else {
        return;
    };
    let out = Command::new("python3")
        .arg(cloud::scripts_dir().join("smoke.py"))
        .arg("--clouds")
        .arg(&clouds)
        .arg("--cloud")
        .arg(cloud::MEMBER)
        .arg("--own-project")
        .output()
        .expect("run python3 tests/cloud/smoke.py");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    eprintln!("{stdout}{stderr}");
    let last = stdout.lines().last().unwrap_or_default();
    let counts: Vec<u32> = last
        .strip_prefix("smoke: ")
        .map(|rest| {
            rest.split(|c: char| !c.is_ascii_digit())
                .filter_map(|n| n.parse().ok())
                .collect()
        })
        .unwrap_or_default();
    assert!(out.status.success(), "smoke.py failed: {last}");
    assert_eq!(counts.len(), 2, "unexpected summary line: {last:?}");
    assert!(counts[0] >= 25, "too few checks ran: {last}");
    assert_eq!(counts[1], 0, "{last}");
    // The summary is printed after the resource-count comparison, which is one of
    // the checks, so "0 failed" also means nothing was left behind.
    assert!(
        stdout.contains("ok   resource counts back to where they started"),
        "the leftover comparison did not run"
    );
}
