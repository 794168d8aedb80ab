//! The image table (`extensions/addons/versions.yaml`): per Kubernetes minor the
//! cloud-provider-openstack release and its CSI sidecars, and the Cilium
//! releases a cluster may choose. The CCM and CSI follow the control plane's
//! minor and are never ahead of it: a minor the table lacks gets the closest
//! older one.

use std::collections::BTreeMap;
use std::sync::OnceLock;

use serde::Deserialize;

const SOURCE: &str = include_str!("../../extensions/addons/versions.yaml");

/// Image references of one minor, by the name the manifests read them under.
pub type Images = BTreeMap<String, String>;

#[derive(Clone, Debug, Deserialize)]
pub struct CiliumRelease {
    pub agent: String,
    pub operator: String,
}

#[derive(Debug, Deserialize)]
struct Table {
    kubernetes: BTreeMap<String, Images>,
    cilium: CiliumTable,
}

#[derive(Debug, Deserialize)]
struct CiliumTable {
    default: String,
    versions: BTreeMap<String, CiliumRelease>,
}

#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum VersionError {
    #[error("Kubernetes version {0:?} is not a version (want v1.MINOR.PATCH)")]
    Unparsable(String),
    #[error(
        "Kubernetes {version} is older than every release of the addons' table (oldest {oldest})"
    )]
    TooOld { version: String, oldest: String },
    #[error("Cilium {wanted} is not one of the shipped releases ({known})")]
    UnknownCilium { wanted: String, known: String },
    #[error("the addons' version table does not load: {0}")]
    Table(String),
}

fn table() -> Result<&'static Table, VersionError> {
    static T: OnceLock<Result<Table, String>> = OnceLock::new();
    T.get_or_init(|| serde_saphyr::from_str(SOURCE).map_err(|e| e.to_string()))
        .as_ref()
        .map_err(|e| VersionError::Table(e.clone()))
}

/// `(major, minor)` of `v1.33.1`, `1.33` or `v1.33.1+build`.
pub fn minor_of(version: &str) -> Option<(u64, u64)> {
    let v = version.trim().trim_start_matches('v');
    let mut it = v.split(['.', '-', '+']);
    let major = it.next()?.parse().ok()?;
    let minor = it.next()?.parse().ok()?;
    Some((major, minor))
}

/// The table's minor for `version` and its images.
pub fn kubernetes(version: &str) -> Result<(&'static str, &'static Images), VersionError> {
    let want = minor_of(version).ok_or_else(|| VersionError::Unparsable(version.to_string()))?;
    let t = table()?;
    let mut best: Option<((u64, u64), &'static str, &'static Images)> = None;
    for (k, images) in &t.kubernetes {
        let Some(m) = minor_of(k) else { continue };
        if m <= want && best.is_none_or(|(b, _, _)| m > b) {
            best = Some((m, k.as_str(), images));
        }
    }
    match best {
        Some((_, k, images)) => Ok((k, images)),
        None => Err(VersionError::TooOld {
            version: version.to_string(),
            oldest: t
                .kubernetes
                .keys()
                .filter_map(|k| minor_of(k).map(|m| (m, k)))
                .min()
                .map(|(_, k)| k.clone())
                .unwrap_or_default(),
        }),
    }
}

/// The Cilium release `wanted` (with or without `v`), else the table's default.
pub fn cilium(
    wanted: Option<&str>,
) -> Result<(&'static str, &'static CiliumRelease), VersionError> {
    let t = table()?;
    let key = wanted
        .map(|w| w.trim().trim_start_matches('v'))
        .filter(|w| !w.is_empty())
        .unwrap_or(&t.cilium.default);
    t.cilium
        .versions
        .get_key_value(key)
        .map(|(k, r)| (k.as_str(), r))
        .ok_or_else(|| VersionError::UnknownCilium {
            wanted: key.to_string(),
            known: t
                .cilium
                .versions
                .keys()
                .cloned()
                .collect::<Vec<_>>()
                .join(", "),
        })
}

/// The Cilium releases the table ships (the pack's enum lists the same).
pub fn cilium_releases() -> Vec<&'static str> {
    table()
        .map(|t| t.cilium.versions.keys().map(String::as_str).collect())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_loads_and_every_minor_names_every_image() {
        let t = table().expect("versions.yaml");
        assert!(t.kubernetes.len() >= 4);
        let keys: Vec<&String> = t.kubernetes.values().next().unwrap().keys().collect();
        for (minor, images) in &t.kubernetes {
            assert_eq!(images.keys().collect::<Vec<_>>(), keys, "{minor}");
            let (_, m) = minor_of(minor).unwrap();
            for key in ["cloudControllerManager", "cinderCSIPlugin"] {
                let image = &images[key];
                assert!(
                    image.contains(&format!(":v1.{m}.")),
                    "{minor}: {key} {image} is not of its minor"
                );
            }
        }
        assert!(t.cilium.versions.contains_key(&t.cilium.default));
    }

    #[test]
    fn the_minor_follows_the_control_plane_and_never_goes_ahead() {
        let (m, images) = kubernetes("v1.33.1").unwrap();
        assert_eq!(m, "1.33");
        assert!(images["cloudControllerManager"].ends_with(":v1.33.1"));
        assert_eq!(kubernetes("v1.34.250").unwrap().0, "1.34");
        // A newer minor than the table knows gets the newest it has, never a guess.
        let newest = table()
            .unwrap()
            .kubernetes
            .keys()
            .filter_map(|k| minor_of(k))
            .max()
            .unwrap();
        let beyond = format!("v1.{}.0", newest.1 + 3);
        assert_eq!(minor_of(kubernetes(&beyond).unwrap().0), Some(newest));
        assert!(matches!(
            kubernetes("v1.20.0"),
            Err(VersionError::TooOld { .. })
        ));
        assert!(matches!(
            kubernetes("latest"),
            Err(VersionError::Unparsable(_))
        ));
    }

    #[test]
    fn cilium_is_the_default_or_a_shipped_release() {
        let (default, _) = cilium(None).unwrap();
        assert_eq!(cilium(Some("")).unwrap().0, default);
        let other = cilium_releases()
            .into_iter()
            .find(|r| *r != default)
            .unwrap();
        assert_eq!(cilium(Some(&format!("v{other}"))).unwrap().0, other);
        let e = cilium(Some("1.2.3")).unwrap_err().to_string();
        assert!(e.contains("1.2.3") && e.contains(default), "{e}");
    }
}
