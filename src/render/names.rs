//! Names and uids of rendered objects.
//!
//! CAPI names generated objects `<prefix><5 random characters>`. A renderer used in CI
//! must give the same output for the same input, so the five characters here come
//! from a SHA-256 of the cluster's namespace and name and the object's role
//! (`control-plane`, `md/<name>/bootstrap`, ...), mapped onto the alphabet Kubernetes
//! draws random suffixes from. The names keep CAPI's shape (and length limit) without
//! being the ones a live cluster gets.

use sha2::{Digest, Sha256};

/// Kubernetes' `utilrand` alphabet: no vowels, no confusable characters.
const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
const RANDOM_LENGTH: usize = 5;
const MAX_NAME_LENGTH: usize = 63;

fn digest(seed: &str) -> [u8; 32] {
    Sha256::digest(seed.as_bytes()).into()
}

/// `<prefix><suffix>`, the prefix cut to leave room for the suffix as CAPI does.
pub fn generated(prefix: &str, seed: &str) -> String {
    let max = MAX_NAME_LENGTH - RANDOM_LENGTH;
    let mut base: String = prefix.chars().take(max).collect();
    let d = digest(seed);
    for b in d.iter().take(RANDOM_LENGTH) {
        base.push(ALPHABET[usize::from(*b) % ALPHABET.len()] as char);
    }
    base
}

/// The random part alone, as a naming template's `{{ .random }}` sees it.
pub fn suffix(seed: &str) -> String {
    generated("", seed)
}

/// The default naming templates of CAPI, equivalent to `generated` with the prefixes
/// `<cluster>-` and `<cluster>-<topology name>-`.
pub const DEFAULT_NAMING: &str = "{{ .cluster.name }}-{{ .random }}";
pub const DEFAULT_MD_NAMING: &str =
    "{{ .cluster.name }}-{{ .machineDeployment.topologyName }}-{{ .random }}";
pub const DEFAULT_MP_NAMING: &str =
    "{{ .cluster.name }}-{{ .machinePool.topologyName }}-{{ .random }}";

/// A name from a ClusterClass naming template (Go text/template over `cluster.name`,
/// `random` and, for workers, `<key>.topologyName` where `worker` is `(key, topology
/// name)` and key is `machineDeployment` or `machinePool`). As in CAPI, a missing key
/// is an error, and a name longer than 63 characters is cut to 58 and given the random
/// part again.
pub fn from_template(
    template: &str,
    cluster: &str,
    worker: Option<(&str, &str)>,
    seed: &str,
) -> Result<String, String> {
    let random = suffix(seed);
    let mut data = serde_json::json!({"cluster": {"name": cluster}, "random": random});
    if let Some((key, name)) = worker {
        data[key] = serde_json::json!({"topologyName": name});
    }
    let t = crate::engine::template::parse(template)
        .map_err(|e| format!("parsing template {template:?}: {e}"))?;
    let name = t
        .render(&data)
        .map_err(|e| format!("rendering template {template:?}: {e}"))?;
    // Go's missingkey=error, which our executor does not have: a missing key is the
    // only way to print this.
    if name.contains("<no value>") {
        return Err(format!(
            "rendering template {template:?}: a key it reads is not set (only .cluster.name, .random{} are)",
            worker.map(|(key, _)| format!(" and .{key}.topologyName")).unwrap_or_default()
        ));
    }
    if name.len() > MAX_NAME_LENGTH {
        let cut: String = name.chars().take(MAX_NAME_LENGTH - RANDOM_LENGTH).collect();
        return Ok(cut + &random);
    }
    Ok(name)
}

/// A UUID-shaped request item uid (CAPI uses a fresh UUID per call).
pub fn uid(seed: &str) -> String {
    let d = digest(seed);
    let hex: String = d.iter().take(16).map(|b| format!("{b:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shape_and_stability() {
        let a = generated("c1-md-0-", "ns/c1/cc/md-0/bootstrap");
        assert_eq!(a, generated("c1-md-0-", "ns/c1/cc/md-0/bootstrap"));
        assert_ne!(a, generated("c1-md-0-", "ns/c1/cc/md-0/infrastructure"));
        assert_eq!(a.len(), "c1-md-0-".len() + 5);
        assert!(a[8..].bytes().all(|b| ALPHABET.contains(&b)));
        let long = generated(&"x".repeat(80), "s");
        assert_eq!(long.len(), 63);
        let u = uid("s");
        assert_eq!(u.len(), 36);
        assert_eq!(u.matches('-').count(), 4);
    }

    #[test]
    fn default_templates_give_the_prefix_names() {
        let long = "c".repeat(70);
        for cluster in ["dev1", long.as_str()] {
            assert_eq!(
                from_template(DEFAULT_NAMING, cluster, None, "s").unwrap(),
                generated(&format!("{cluster}-"), "s")
            );
            assert_eq!(
                from_template(
                    DEFAULT_MD_NAMING,
                    cluster,
                    Some(("machineDeployment", "md-0")),
                    "s"
                )
                .unwrap(),
                generated(&format!("{cluster}-md-0-"), "s")
            );
        }
        assert_eq!(generated(&format!("{long}-"), "s").len(), 63);
    }

    #[test]
    fn custom_templates_and_their_errors() {
        let r = suffix("s");
        assert_eq!(
            from_template("{{ .cluster.name }}-cp-{{ .random }}", "dev1", None, "s").unwrap(),
            format!("dev1-cp-{r}")
        );
        assert_eq!(
            from_template(
                "fixed-{{ .machineDeployment.topologyName }}",
                "dev1",
                Some(("machineDeployment", "w")),
                "s"
            )
            .unwrap(),
            "fixed-w"
        );
        let e =
            from_template("{{ .machineDeployment.topologyName }}", "dev1", None, "s").unwrap_err();
        assert!(e.contains("not set"), "{e}");
        // A MachinePool's template reads `.machinePool`, not `.machineDeployment`.
        assert_eq!(
            from_template(
                DEFAULT_MP_NAMING,
                "dev1",
                Some(("machinePool", "mp-0")),
                "s"
            )
            .unwrap(),
            generated("dev1-mp-0-", "s")
        );
        let e = from_template(
            "{{ .machineDeployment.topologyName }}",
            "dev1",
            Some(("machinePool", "mp-0")),
            "s",
        )
        .unwrap_err();
        assert!(e.contains(".machinePool.topologyName are"), "{e}");
        assert!(from_template("{{ .cluster.name", "dev1", None, "s").is_err());
    }
}
