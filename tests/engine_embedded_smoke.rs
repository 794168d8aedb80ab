use stackhook::engine::{PackEngine, PatchEngine};
#[test]
fn embedded_packs_load() {
    let e = match PackEngine::embedded() { Ok(e) => e, Err(e) => panic!("{e}") };
    assert_eq!(e.handlers().generate_patches, vec!["cilium".to_string(), "openstack".to_string()]);
}
