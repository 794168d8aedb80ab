//! Status writes of the OpenStack controllers: the [`StatusSink`] the cloud half
//! calls after every create, and the minimal JSON merge patch (RFC 7396) between
//! what was last written and what is wanted.

use std::fmt::Debug;
use std::marker::PhantomData;
use std::sync::Mutex;

use kube::api::{Patch, PatchParams};
use kube::{Api, Resource};
use prometheus_client::metrics::counter::Counter;
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::{Map, Value};

use crate::infra::api::{OpenStackCluster, OpenStackClusterStatus};
use crate::infra::seam::{SinkError, StatusSink};

/// The merge patch that turns `old` into `new`: changed members, `null` for
/// removed ones; `None` when nothing changed. Arrays are replaced whole, as
/// RFC 7396 does.
pub fn merge_diff(old: &Value, new: &Value) -> Option<Value> {
    match (old, new) {
        (Value::Object(o), Value::Object(n)) => {
            let mut patch = Map::new();
            for (k, nv) in n {
                match o.get(k) {
                    Some(ov) => {
                        if let Some(d) = merge_diff(ov, nv) {
                            patch.insert(k.clone(), d);
                        }
                    }
                    None => {
                        patch.insert(k.clone(), nv.clone());
                    }
                }
            }
            for k in o.keys() {
                if !n.contains_key(k) {
                    patch.insert(k.clone(), Value::Null);
                }
            }
            (!patch.is_empty()).then_some(Value::Object(patch))
        }
        _ if old == new => None,
        _ => Some(new.clone()),
    }
}

/// Writes `/status` of one object of kind `K` (status type `S`) with merge patches
/// against the last status it wrote, so a write carries only what changed and clears
/// what the new status no longer has.
pub struct PatchStatusSink<K = OpenStackCluster, S = OpenStackClusterStatus> {
    api: Api<K>,
    name: String,
    last: Mutex<Value>,
    writes: Option<Counter>,
    status: PhantomData<fn() -> S>,
}

impl<K, S> PatchStatusSink<K, S>
where
    K: Resource + Clone + DeserializeOwned + Debug,
    S: Serialize + DeserializeOwned + Default,
{
    /// `current` is the status of the object as read (or `None`).
    pub fn new(api: Api<K>, name: &str, current: Option<&S>) -> PatchStatusSink<K, S> {
        let last = current
            .and_then(|s| serde_json::to_value(s).ok())
            .unwrap_or_else(|| Value::Object(Map::new()));
        PatchStatusSink {
            api,
            name: name.to_string(),
            last: Mutex::new(last),
            writes: None,
            status: PhantomData,
        }
    }

    /// Counts every request this sink sends in `writes`.
    pub fn counting(mut self, writes: Counter) -> PatchStatusSink<K, S> {
        self.writes = Some(writes);
        self
    }

    /// The last status written (or read), for building the next one.
    pub fn last(&self) -> S {
        let last = self.last.lock().unwrap_or_else(|e| e.into_inner()).clone();
        serde_json::from_value(last).unwrap_or_default()
    }

    /// Writes `status`; no request when nothing changed.
    pub async fn write(&self, status: &S) -> Result<(), SinkError> {
        let new = serde_json::to_value(status).map_err(|e| SinkError(e.to_string()))?;
        let diff = {
            let last = self.last.lock().unwrap_or_else(|e| e.into_inner());
            merge_diff(&last, &new)
        };
        let Some(diff) = diff else {
            return Ok(());
        };
        let body = serde_json::json!({ "status": diff });
        self.api
            .patch_status(&self.name, &PatchParams::default(), &Patch::Merge(&body))
            .await
            .map_err(|e| SinkError(e.to_string()))?;
        if let Some(writes) = &self.writes {
            writes.inc();
        }
        *self.last.lock().unwrap_or_else(|e| e.into_inner()) = new;
        Ok(())
    }
}

impl<K, S> StatusSink<S> for PatchStatusSink<K, S>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync,
    S: Serialize + DeserializeOwned + Default + Sync,
{
    async fn save(&self, status: &S) -> Result<(), SinkError> {
        self.write(status).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn merge_diff_sends_changes_and_nulls() {
        let old = json!({"ready": false, "network": {"id": "n1", "name": "a"}, "failureReason": "x", "conditions": [1]});
        let new = json!({"ready": true, "network": {"id": "n1", "name": "b"}, "conditions": [1]});
        assert_eq!(
            merge_diff(&old, &new),
            Some(json!({"ready": true, "network": {"name": "b"}, "failureReason": null}))
        );
        assert_eq!(merge_diff(&new, &new), None);
        assert_eq!(
            merge_diff(&json!({"conditions": [1]}), &json!({"conditions": [1, 2]})),
            Some(json!({"conditions": [1, 2]}))
        );
    }

    #[test]
    fn patch_applied_to_old_gives_new() {
        let old = json!({"a": {"b": 1, "c": [1, 2]}, "d": "x"});
        let new = json!({"a": {"c": [3]}, "e": {"f": null}});
        let mut patched = old.clone();
        json_patch::merge(&mut patched, &merge_diff(&old, &new).unwrap());
        // RFC 7396 drops nulls on merge, so a null member in `new` reads as absent.
        assert_eq!(patched, json!({"a": {"c": [3]}, "e": {}}));
    }
}
