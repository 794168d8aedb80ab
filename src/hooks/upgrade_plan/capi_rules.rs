//! CAPI's check of an upgrade plan (`DefaultAndValidateUpgradePlans` in
//! `exp/topology/desiredstate/upgrade_plan.go`, v1.12 to v1.14), restated so the tests
//! hold our answers to the rules CAPI applies to them, including how it fills in the
//! workers' steps when an extension leaves them empty.

use std::collections::{BTreeMap, BTreeSet};

use super::{compare, parse_tolerant, Order};

fn parse(what: &str, s: &str) -> Result<semver::Version, String> {
    parse_tolerant(s).ok_or_else(|| format!("failed to parse {what} version {s}"))
}

fn plain(v: &semver::Version) -> String {
    format!("v{v}")
}

/// Returns the workers' plan CAPI would use, or the error CAPI would report.
pub fn default_and_validate(
    desired: &str,
    control_plane: &str,
    min_workers: &str,
    cp_plan: &[String],
    workers_plan: &[String],
) -> Result<Vec<String>, String> {
    let desired_v = parse("Cluster", desired)?;
    let cp_v = parse("ControlPlane", control_plane)?;
    let min_workers_v = if min_workers.is_empty() {
        None
    } else {
        Some(parse("min workers", min_workers)?)
    };
    let mut minors: BTreeMap<u64, String> = BTreeMap::new();
    minors.insert(cp_v.minor, control_plane.to_string());
    let mut order: BTreeMap<String, i64> = BTreeMap::new();
    order.insert(control_plane.to_string(), -1);

    if compare(&cp_v, &desired_v) != Order::Equal {
        let mut current = cp_v.clone();
        for (i, target) in cp_plan.iter().enumerate() {
            order.insert(target.clone(), i as i64);
            let t = parse("plan item", target)?;
            if matches!(compare(&t, &current), Order::Less | Order::Equal) {
                return Err(format!(
                    "invalid ControlPlane upgrade plan: item {i}; version {target} must be greater than {}",
                    plain(&current)
                ));
            }
            if current.minor != t.minor && current.minor + 1 != t.minor {
                return Err(format!(
                    "invalid ControlPlane upgrade plan: item {i}; expecting a version with minor {} or {}, found version {target}",
                    current.minor,
                    current.minor + 1
                ));
            }
            minors.insert(t.minor, target.clone());
            current = t;
        }
        if compare(&current, &desired_v) != Order::Equal {
            return Err(format!(
                "invalid ControlPlane upgrade plan: control plane upgrade plan must end with version {desired}, ends with {} instead",
                plain(&current)
            ));
        }
    } else if !cp_plan.is_empty() {
        return Err(
            "invalid ControlPlane upgrade plan: control plane is already at the desired version"
                .into(),
        );
    }

    let mut workers = workers_plan.to_vec();
    match &min_workers_v {
        Some(mw) if compare(mw, &desired_v) != Order::Equal => {
            if !cp_plan.is_empty() {
                let allowed: BTreeSet<&str> = cp_plan
                    .iter()
                    .map(String::as_str)
                    .chain([control_plane])
                    .collect();
                let stray: Vec<&String> =
                    workers.iter().filter(|w| !allowed.contains(w.as_str())).collect();
                if !stray.is_empty() {
                    return Err(format!("invalid workers upgrade plan: versions {stray:?} doesn't match any versions in the control plane upgrade plan nor the control plane version"));
                }
            }
            if workers.is_empty() {
                let current_minor = mw.minor;
                for i in 0..desired_v.minor.saturating_sub(current_minor) {
                    if i > 0 && i % 3 == 0 {
                        let v = minors.get(&(current_minor + i)).ok_or_else(|| {
                            format!(
                                "invalid upgrade plan; unable to identify version for minor {}",
                                current_minor + i
                            )
                        })?;
                        workers.push(v.clone());
                    }
                }
                if workers.last().map(String::as_str) != Some(desired) {
                    workers.push(desired.to_string());
                }
            }
            let mut current = mw.clone();
            for (i, target) in workers.iter().enumerate() {
                let t = parse("workers plan item", target)?;
                match compare(&t, &current) {
                    Order::Less | Order::Equal => {
                        return Err(format!(
                            "invalid workers upgrade plan, item {i}; version {target} must be greater than {}",
                            plain(&current)
                        ))
                    }
                    Order::Unordered => {
                        let (Some(a), Some(b)) = (order.get(target), order.get(&plain(&current)))
                        else {
                            return Err(format!("invalid workers upgrade plan, item {i}; cannot order {target}"));
                        };
                        if a < b {
                            return Err(format!("invalid workers upgrade plan, item {i}; version {target} must be before {}", plain(&current)));
                        }
                    }
                    Order::Greater => {}
                }
                if t.minor.saturating_sub(current.minor) > 3 {
                    return Err(format!("invalid workers upgrade plan, item {i}; workers cannot go from minor {} to minor {}", current.minor, t.minor));
                }
                current = t;
            }
            if compare(&current, &desired_v) != Order::Equal {
                return Err(format!("invalid workers upgrade plan; workers upgrade plan must end with version {desired}, ends with {} instead", plain(&current)));
            }
        }
        _ if !workers.is_empty() => {
            return Err("invalid worker upgrade plan; there are no workers or workers already at the desired version".into())
        }
        _ => {}
    }
    Ok(workers)
}

#[cfg(test)]
mod tests {
    use super::super::plan;
    use super::*;

    fn known() -> Vec<String> {
        [
            "v1.30.14", "v1.31.0", "v1.31.12", "v1.32.8", "v1.32.9", "v1.33.4", "v1.34.1",
            "v1.35.0",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    }

    /// Plays the upgrade as CAPI does, asking for a plan at every position: the control
    /// plane takes the first step of its plan; the workers take the first step of
    /// theirs once the control plane is at or past it. Every answer must pass CAPI's
    /// check, and both must end at the target.
    fn walk(cp: &str, workers: &str, to: &str) -> Vec<(String, String)> {
        let (mut cp, mut workers) = (cp.to_string(), workers.to_string());
        let mut seen = vec![(cp.clone(), workers.clone())];
        for _ in 0..20 {
            let p = plan(&cp, &workers, to, &known())
                .unwrap_or_else(|e| panic!("plan at ({cp}, {workers}) → {to}: {e}"));
            let wplan = default_and_validate(to, &cp, &workers, &p.control_plane, &p.workers)
                .unwrap_or_else(|e| panic!("CAPI refuses the plan at ({cp}, {workers}): {e}"));
            let minor = |s: &str| parse_tolerant(s).map(|v| v.minor);
            // CAPI moves the control plane only while the workers stay within the
            // version skew (three minors) of where it goes.
            let cp_may_step = p.control_plane.first().filter(|next| {
                workers.is_empty() || minor(next).unwrap() - minor(&workers).unwrap() <= 3
            });
            if let Some(first) = cp_may_step {
                cp = first.clone();
            } else if let Some(first) = wplan.first() {
                let (w, c) = (parse_tolerant(first).unwrap(), parse_tolerant(&cp).unwrap());
                assert!(
                    compare(&w, &c) != Order::Greater,
                    "workers ahead of the control plane"
                );
                workers = first.clone();
            } else {
                return seen;
            }
            seen.push((cp.clone(), workers.clone()));
        }
        panic!("no end: {seen:?}");
    }

    /// Control plane, workers, target, and the positions the upgrade goes through.
    type Case<'a> = (&'a str, &'a str, &'a str, &'a [(&'a str, &'a str)]);

    #[test]
    fn every_state_capi_asks_in_gets_a_plan_capi_accepts() {
        let cases: &[Case] = &[
            // Patch release: one step, then the workers.
            (
                "v1.33.1",
                "v1.33.1",
                "v1.33.4",
                &[("v1.33.4", "v1.33.1"), ("v1.33.4", "v1.33.4")],
            ),
            // Two minors in one edit.
            (
                "v1.31.12",
                "v1.31.12",
                "v1.33.4",
                &[
                    ("v1.32.9", "v1.31.12"),
                    ("v1.33.4", "v1.31.12"),
                    ("v1.33.4", "v1.33.4"),
                ],
            ),
            // The control plane arrived, the workers are one minor behind.
            ("v1.34.1", "v1.33.1", "v1.34.1", &[("v1.34.1", "v1.34.1")]),
            // Arrived, workers three minors behind (the widest skew).
            ("v1.34.1", "v1.31.0", "v1.34.1", &[("v1.34.1", "v1.34.1")]),
            // No workers.
            (
                "v1.32.8",
                "",
                "v1.34.1",
                &[("v1.33.4", ""), ("v1.34.1", "")],
            ),
            // Four minors: CAPI inserts a worker step to respect the skew.
            (
                "v1.30.14",
                "v1.30.14",
                "v1.34.1",
                &[
                    ("v1.31.12", "v1.30.14"),
                    ("v1.32.9", "v1.30.14"),
                    ("v1.33.4", "v1.30.14"),
                    ("v1.33.4", "v1.33.4"),
                    ("v1.34.1", "v1.33.4"),
                    ("v1.34.1", "v1.34.1"),
                ],
            ),
            // Versions as CAPI accepts them: build metadata, no `v`.
            (
                "v1.33.1+vendor.1",
                "v1.33.1+vendor.1",
                "v1.33.1+vendor.2",
                &[
                    ("v1.33.1+vendor.2", "v1.33.1+vendor.1"),
                    ("v1.33.1+vendor.2", "v1.33.1+vendor.2"),
                ],
            ),
            (
                "1.32.9",
                "1.32.9",
                "1.33.4",
                &[("1.33.4", "1.32.9"), ("1.33.4", "1.33.4")],
            ),
        ];
        for (cp, workers, to, want) in cases {
            let got = walk(cp, workers, to);
            let want: Vec<(String, String)> =
                std::iter::once((cp.to_string(), workers.to_string()))
                    .chain(want.iter().map(|(a, b)| (a.to_string(), b.to_string())))
                    .collect();
            assert_eq!(got, want, "{cp} / {workers} → {to}");
        }
    }

    #[test]
    fn the_rules_refuse_what_capi_refuses() {
        let s = |l: &[&str]| l.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        // A skipped minor, a plan past the target, steps once arrived.
        assert!(default_and_validate("v1.33.0", "v1.31.0", "", &s(&["v1.33.0"]), &[]).is_err());
        assert!(
            default_and_validate("v1.32.0", "v1.31.0", "", &s(&["v1.32.0", "v1.32.1"]), &[])
                .is_err()
        );
        assert!(
            default_and_validate("v1.34.1", "v1.34.1", "v1.33.1", &s(&["v1.34.1"]), &[]).is_err()
        );
        // The answer the server gave before: a Failure is no plan at all.
        assert!(default_and_validate("v1.34.1", "v1.34.1", "v1.33.1", &[], &[]).is_ok());
    }
}
